// CPPGRAD_ARG(type, name, default): every options struct's chainable setters and getters,
// MultiheadAttentionOptions(512, 8).dropout(0.1).bias(false), as in libtorch. Defined in
// tensor/options.h so that the floors below nn use it too.
#pragma once

#include "../tensor/options.h"
