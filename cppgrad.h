// cppgrad: the one header a user includes.
#pragma once

#include "tensor/tensor.h"
#include "tensor/parallel.h"
#include "autograd/node.h"
#include "autograd/functions.h"
#include "autograd/gradcheck.h"
#include "nn/module.h"
#include "nn/init.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/attention.h"
#include "nn/transformer.h"
#include "nn/safetensors.h"
