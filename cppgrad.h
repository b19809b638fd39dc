// cppgrad: the one header a user includes.
#pragma once

#include "tensor/tensor.h"
#include "tensor/parallel.h"
#include "autograd/node.h"
#include "autograd/functions.h"
#include "autograd/gradcheck.h"
