// Printing in PyTorch's style, with the shape (and any dtype but float32) after the values.
#include <algorithm>
#include <cmath>

#include "helpers.h"

using namespace cppgrad;

namespace {
std::string printed(const Tensor& t) { return fmt::format("{}", t); }
}  // namespace

TEST_CASE("print: a small float32 matrix") {
  CHECK(printed(tensor({{1, 2.5}, {3, 4}})) ==
        "tensor([[1.0000, 2.5000],\n"
        "        [3.0000, 4.0000]], shape=[2,2])");
}

TEST_CASE("print: whole floats print with a trailing point") {
  CHECK(printed(tensor({1, 2, 3})) == "tensor([1., 2., 3.], shape=[3])");
  CHECK(printed(tensor({-10, 0, 200})) == "tensor([-10.,   0., 200.], shape=[3])");
}

TEST_CASE("print: values are padded to one width") {
  CHECK(printed(tensor({-1, 2, 3.25})) == "tensor([-1.0000,  2.0000,  3.2500], shape=[3])");
}

TEST_CASE("print: float64 names its dtype") {
  CHECK(printed(tensor({0.5, -0.25}, kFloat64)) == "tensor([ 0.5000, -0.2500], shape=[2], dtype=float64)");
}

TEST_CASE("print: int64") {
  CHECK(printed(tensor({{1, -20}, {300, 4}}, kInt64)) ==
        "tensor([[  1, -20],\n"
        "        [300,   4]], shape=[2,2], dtype=int64)");
}

TEST_CASE("print: bool") {
  CHECK(printed(tensor({{1, 0}, {0, 1}}, kBool)) ==
        "tensor([[ True, False],\n"
        "        [False,  True]], shape=[2,2], dtype=bool)");
}

TEST_CASE("print: 0-d tensors") {
  CHECK(printed(scalar_tensor(3.5)) == "tensor(3.5000, shape=[])");
  CHECK(printed(scalar_tensor(-7, kInt64)) == "tensor(-7, shape=[], dtype=int64)");
  CHECK(printed(scalar_tensor(2, kFloat64)) == "tensor(2., shape=[], dtype=float64)");
  CHECK(printed(scalar_tensor(1, kBool)) == "tensor(True, shape=[], dtype=bool)");
}

TEST_CASE("print: scientific notation when magnitudes are far apart") {
  CHECK(printed(tensor({1e-5, 1, 100}, kFloat64)) ==
        "tensor([1.0000e-05, 1.0000e+00, 1.0000e+02], shape=[3], dtype=float64)");
  CHECK(printed(tensor({0.5, 1e9})) == "tensor([5.0000e-01, 1.0000e+09], shape=[2])");
}

TEST_CASE("print: nan and infinities") {
  CHECK(printed(tensor({NAN, INFINITY, -INFINITY, 1.5})) == "tensor([   nan,    inf,   -inf, 1.5000], shape=[4])");
}

TEST_CASE("print: a 3-d tensor separates its blocks by a blank line") {
  CHECK(printed(arange(12).reshape({2, 2, 3})) ==
        "tensor([[[ 0,  1,  2],\n"
        "         [ 3,  4,  5]],\n"
        "\n"
        "        [[ 6,  7,  8],\n"
        "         [ 9, 10, 11]]], shape=[2,2,3], dtype=int64)");
}

TEST_CASE("print: a strided view prints in its own order") {
  Tensor t = tensor({{1, 2, 3}, {4, 5, 6}}, kInt64).t();
  CHECK(printed(t) ==
        "tensor([[1, 4],\n"
        "        [2, 5],\n"
        "        [3, 6]], shape=[3,2], dtype=int64)");
  CHECK(printed(arange(10).slice(0, 1, 10, 4)) == "tensor([1, 5, 9], shape=[3], dtype=int64)");
}

TEST_CASE("print: empty and undefined tensors") {
  CHECK(printed(zeros({0})) == "tensor([], shape=[0])");
  CHECK(printed(Tensor()) == "tensor(undefined)");
}

TEST_CASE("print: str gives the same text as fmt") {
  Tensor t = tensor({{0.25, -1}, {8, 3}});
  CHECK(t.str() == printed(t));
  CHECK(fmt::format("x = {}", t) == "x = " + t.str());
}

TEST_CASE("print: more than 1000 elements are elided with ...") {
  CHECK(printed(arange(2000)) == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999], shape=[2000], dtype=int64)");
  CHECK(printed(arange(2000).reshape({40, 50})) ==
        "tensor([[   0,    1,    2,  ...,   47,   48,   49],\n"
        "        [  50,   51,   52,  ...,   97,   98,   99],\n"
        "        [ 100,  101,  102,  ...,  147,  148,  149],\n"
        "        ...,\n"
        "        [1850, 1851, 1852,  ..., 1897, 1898, 1899],\n"
        "        [1900, 1901, 1902,  ..., 1947, 1948, 1949],\n"
        "        [1950, 1951, 1952,  ..., 1997, 1998, 1999]], shape=[40,50], dtype=int64)");
  // A dim of at most six entries is shown whole even when the tensor is elided.
  CHECK(printed(arange(1002).reshape({2, 501})).find("[   0,    1,    2,  ...,  498,  499,  500],\n") !=
        std::string::npos);
}

TEST_CASE("print: 1000 elements are shown in full") {
  std::string s = printed(arange(1000));
  CHECK(s.find("...") == std::string::npos);
  CHECK(std::count(s.begin(), s.end(), ',') == 999 + 2);  // 999 between values, 2 before shape and dtype
  CHECK(s.find(" 500, 501,") != std::string::npos);
}
