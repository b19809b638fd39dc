// Sizes that cannot exist: element counts past int64, byte counts past 64 bits or past the
// machine's memory. Every factory, view, reshape, expand and reduction refuses them with an
// Error; an empty tensor with a huge other dimension works wherever its result can exist.
#include "helpers.h"

using namespace cppgrad;
using namespace cppgrad::testing;
using doctest::Contains;

namespace {
constexpr int64_t kTwo32 = int64_t{1} << 32, kTwo62 = int64_t{1} << 62;
}

TEST_CASE("sizes: factories refuse element counts that overflow int64") {
  // 2^32 · 2^32 wrapped to 0 elements, 3 · 2^62 to a negative count: both once "succeeded".
  CHECK_THROWS_WITH_AS(zeros({kTwo32, kTwo32}), Contains("zeros: the sizes of shape [4294967296,4294967296] multiply past"),
                       Error);
  CHECK_THROWS_WITH_AS(zeros({3, kTwo62}), Contains("multiply past the int64 range"), Error);
  CHECK_THROWS_WITH_AS(empty({kTwo32, kTwo32, 0}), Contains("multiply past"), Error);  // empty, but its strides overflow
  CHECK_THROWS_WITH_AS(ones({kTwo62, 4}), Contains("full: the sizes of shape"), Error);
  CHECK_THROWS_WITH_AS(rand({kTwo32, kTwo32}), Contains("multiply past"), Error);
  CHECK_THROWS_WITH_AS(eye(kTwo32), Contains("multiply past"), Error);
  CHECK_THROWS_WITH_AS(zeros({-1, 2}), Contains("negative size"), Error);
  CHECK_THROWS_WITH_AS(tensor(std::vector<float>{1.0f}, {3, 6148914691236517205}), Contains("multiply past"), Error);
  CHECK_THROWS_WITH_AS(arange(0, 1e300), Contains("arange: range"), Error);
  CHECK_THROWS_WITH_AS(arange(0, std::numeric_limits<double>::infinity()), Contains("too many elements"), Error);
}

TEST_CASE("sizes: byte counts past 64 bits or past the machine's memory are refused, not attempted") {
  // 2^61 float64 elements fit int64, but their bytes do not fit 64 bits.
  CHECK_THROWS_WITH_AS(zeros({int64_t{1} << 61}, kFloat64), Contains("bytes"), Error);
  // 2^40 floats are 4.4 TB: more than any machine this runs on, refused before asking for them.
  // An OutOfMemoryError (an Error of its own type, as torch.OutOfMemoryError), so that a program
  // can tell a request the machine cannot grant from bad input.
  CHECK_THROWS_WITH_AS(zeros({int64_t{1} << 40}), Contains("more than this machine's"), OutOfMemoryError);
  CHECK_THROWS_WITH_AS(full({int64_t{1} << 40}, 1.0), Contains("memory"), OutOfMemoryError);
}

TEST_CASE("sizes: view, reshape and expand refuse shapes whose count wraps") {
  Tensor one = ones({1});
  // 3 · 6148914691236517205 ≡ 1 (mod 2^64): the product wraps to exactly the element count.
  CHECK_THROWS_WITH_AS(one.view({3, 6148914691236517205}), Contains("view"), Error);
  CHECK_THROWS_WITH_AS(one.reshape({3, 6148914691236517205}), Contains("reshape"), Error);
  CHECK_THROWS_WITH_AS(one.reshape({-1, kTwo32, kTwo32}), Contains("multiply past"), Error);
  CHECK_THROWS_WITH_AS(one.expand({kTwo32, kTwo32}), Contains("expand"), Error);
  CHECK_THROWS_WITH_AS(one.expand({kTwo62, 4}), Contains("multiply past"), Error);
  // Within range, expand still makes a view without memory.
  Tensor wide = one.expand({kTwo32});
  CHECK(wide.numel() == kTwo32);
  CHECK(wide.strides() == Strides{0});
}

TEST_CASE("sizes: an empty tensor with a huge dimension works where its result can exist") {
  Tensor t = zeros({kTwo62, 0});  // what a safetensors file may rightly hold
  CHECK(t.numel() == 0);
  CHECK(t.sum().item() == 0.0);
  CHECK(t.sum({0}).shape() == Shape{0});
  CHECK((t + 1.0).shape() == t.shape());
  CHECK(t.transpose(0, 1).shape() == Shape{0, kTwo62});
  CHECK(t.reshape({0}).numel() == 0);
  // Reducing the empty dim leaves 2^62 sums: 2^64 bytes of float32, which once raised SIGFPE.
  CHECK_THROWS_WITH_AS(t.sum({1}), Contains("sum: reducing shape [4611686018427387904,0]"), Error);
  CHECK_THROWS_WITH_AS(t.mean({1}), Contains("mean: reducing"), Error);
  CHECK_THROWS_WITH_AS(t.matmul(zeros({0, kTwo62})), Contains("matmul"), Error);
  CHECK(t.max(0).values.shape() == Shape{0});          // no set to reduce: no maximum to give
  CHECK_THROWS_AS(t.max(1), Error);                      // 2^62 empty sets: none has a maximum
  CHECK_THROWS_WITH_AS(cat({zeros({kTwo62, 0}), zeros({kTwo62, 0})}, 0), Contains("add up past"), Error);
}

TEST_CASE("sizes: a generator refuses a state no seeding can reach") {
  Generator gen(3);
  Generator::State zero = gen.state();
  zero.s = {0, 0, 0, 0};  // xoshiro's fixed point: every draw would be 0
  CHECK_THROWS_WITH_AS(gen.set_state(zero), Contains("all zero"), Error);
  Generator::State bad_normal = gen.state();
  bad_normal.has_cached_normal = true;
  bad_normal.cached_normal = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(gen.set_state(bad_normal), Contains("cached normal"), Error);
  // Refused states leave the generator as it was.
  Generator same(3);
  CHECK(gen.next_u64() == same.next_u64());
}

TEST_CASE("excerpt: input quoted in an error is cut short, on one line") {
  const std::string huge(10'000'000, 'x');
  const std::string shown = excerpt(huge);
  CHECK(shown.size() < 120);
  CHECK(shown.ends_with("...(10000000 bytes)"));
  CHECK(excerpt("short") == "short");
  CHECK(excerpt("two\nlines\x01") == "two\\nlines\\x01");
  // Cut where no UTF-8 character is split: 'é' is 2 bytes, and 79 'a' leave one byte of room.
  const std::string accented = std::string(79, 'a') + "\xc3\xa9" + "tail";
  CHECK(excerpt(accented).starts_with(std::string(79, 'a') + "..."));
}

TEST_CASE("shape_str: a shape of more than 16 dimensions is cut, so that a message stays a line") {
  CHECK(shape_str({}) == "[]");
  CHECK(shape_str({2, 3}) == "[2,3]");
  CHECK(shape_str(std::vector<int64_t>(16, 1)) == "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]");
  std::vector<int64_t> hostile(50'000'000, 1);  // a rank a hostile file's header can declare
  hostile.back() = 7;
  CHECK(shape_str(hostile) == "[1,1,1,1,1,1,1,1,...(49999990 more),1,7]");
}

TEST_CASE("excerpt: bytes that are not UTF-8 are escaped, well-formed characters kept") {
  CHECK(excerpt("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");  // é 日 😀
  CHECK(excerpt("a\xff" "b") == "a\\xffb");                // never in UTF-8
  CHECK(excerpt("\x80\x80") == "\\x80\\x80");          // stray continuation bytes
  CHECK(excerpt("\xc3(") == "\\xc3(");                  // a lead byte without its continuation
  CHECK(excerpt("\xc0\xaf") == "\\xc0\\xaf");          // an overlong '/'
  CHECK(excerpt("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a UTF-16 surrogate
  CHECK(excerpt("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  CHECK(excerpt("ab\xe6\x97") == "ab\\xe6\\x97");      // a character cut short by the input's end
  // The result is always valid UTF-8, whatever came in.
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  const std::string shown = excerpt(every_byte, 1000);
  for (size_t i = 0; i < shown.size();) {
    const size_t length = utf8_char_length(std::string_view(shown).substr(i));
    REQUIRE(length > 0);
    i += length;
  }
  // A run of continuation bytes is not backed out of entirely when it is cut.
  CHECK(excerpt(std::string(200, '\x80')).starts_with("\\x80"));
}
