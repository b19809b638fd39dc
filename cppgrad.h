// cppgrad: the one header a user includes.
#pragma once

#include <fmt/ranges.h>  // fmt::print("{}", t.shape()) prints [2, 3]

#include "tensor/tensor.h"
#include "tensor/allocator.h"
#include "tensor/parallel.h"
#include "tensor/profile.h"
#include "autograd/node.h"
#include "autograd/functions.h"
#include "autograd/function.h"
#include "autograd/dot.h"
#include "autograd/functional.h"
#include "autograd/gradcheck.h"
#include "nn/module.h"
#include "nn/init.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/attention.h"
#include "nn/transformer.h"
#include "nn/safetensors.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
#include "optim/adam.h"
#include "optim/schedule.h"
#include "optim/clip.h"
#include "optim/average.h"
#include "data/data.h"
