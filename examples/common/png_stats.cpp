// png_stats: what a PNG holds, for check_pictures.sh: its size from the IHDR chunk, and counts
// of its pixels, inflated with zlib and unfiltered as the PNG specification says.
//
//   png_stats FILE  ->  width height distinct_colours non_white_share blue_share red_share
//
// non_white_share: the share of pixels not (nearly) white; blue_share and red_share: of pixels
// clearly blue (attention cells, the training loss) or red (the held-out curve).
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  std::fprintf(stderr, "png_stats: %s: %s\n", path.c_str(), why.c_str());
  std::exit(1);
}

uint32_t big_endian(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

int paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: png_stats FILE\n");
    return 2;
  }
  const std::string path = argv[1];
  if (std::filesystem::exists(path) && !std::filesystem::is_regular_file(path)) fail(path, "not a file");
  std::ifstream file(path, std::ios::binary);
  if (!file) fail(path, "cannot open");
  const std::vector<unsigned char> data{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (data.size() < 8 || !std::equal(signature, signature + 8, data.begin())) fail(path, "not a PNG");

  // The chunks: length, type, body, CRC. IHDR gives the size and the pixel format; the IDAT
  // bodies, joined, are one zlib stream.
  uint32_t width = 0, height = 0;
  int channels = 0;
  std::vector<unsigned char> compressed;
  for (size_t pos = 8; pos + 12 <= data.size();) {
    const uint32_t length = big_endian(&data[pos]);
    const std::string type(data.begin() + static_cast<long>(pos) + 4, data.begin() + static_cast<long>(pos) + 8);
    if (pos + 12 + length > data.size()) fail(path, "a chunk runs past the end");
    const unsigned char* body = &data[pos + 8];
    if (type == "IHDR") {
      width = big_endian(body), height = big_endian(body + 4);
      const int depth = body[8], colour = body[9], interlace = body[12];
      channels = colour == 0 ? 1 : colour == 2 ? 3 : colour == 4 ? 2 : colour == 6 ? 4 : 0;
      if (depth != 8 || channels == 0 || interlace != 0)
        fail(path, "not 8-bit grey or RGB(A) without interlacing, which rsvg-convert writes");
    } else if (type == "IDAT") {
      compressed.insert(compressed.end(), body, body + length);
    } else if (type == "IEND") {
      break;
    }
    pos += 12 + length;
  }
  if (width == 0 || height == 0) fail(path, "no IHDR, or an empty image");

  const size_t stride = size_t{width} * static_cast<size_t>(channels);
  std::vector<unsigned char> raw(size_t{height} * (stride + 1));
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, compressed.data(), compressed.size()) != Z_OK || raw_size != raw.size())
    fail(path, "the image data does not inflate to height x (1 + width x channels) bytes");

  // Each row starts with its filter: its bytes were stored as differences from the byte to the
  // left (a), above (b) or above-left (c), or from their average or Paeth's predictor of them.
  std::vector<unsigned char> previous(stride, 0), row(stride);
  std::set<uint32_t> colours;
  size_t non_white = 0, blue = 0, red = 0;
  for (uint32_t y = 0; y < height; ++y) {
    const unsigned char* line = &raw[y * (stride + 1)];
    const int filter = line[0];
    if (filter > 4) fail(path, "unknown row filter " + std::to_string(filter));
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= static_cast<size_t>(channels) ? row[x - channels] : 0, b = previous[x];
      const int c = x >= static_cast<size_t>(channels) ? previous[x - channels] : 0;
      const int predicted = filter == 1 ? a : filter == 2 ? b : filter == 3 ? (a + b) / 2 : filter == 4 ? paeth(a, b, c) : 0;
      row[x] = static_cast<unsigned char>(line[1 + x] + predicted);
    }
    for (size_t x = 0; x < stride; x += static_cast<size_t>(channels)) {
      const int r = row[x], g = channels >= 3 ? row[x + 1] : r, b = channels >= 3 ? row[x + 2] : r;
      const int alpha = channels == 4 ? row[x + 3] : channels == 2 ? row[x + 1] : 255;
      colours.insert(static_cast<uint32_t>(r) << 24 | static_cast<uint32_t>(g) << 16 | static_cast<uint32_t>(b) << 8 |
                     static_cast<uint32_t>(alpha));
      if (alpha > 128 && std::min({r, g, b}) < 240) {
        ++non_white;
        blue += b > r + 40;
        red += r > b + 60 && r > g + 60;
      }
    }
    previous = row;
  }
  const double n = static_cast<double>(width) * static_cast<double>(height);
  std::printf("%u %u %zu %.4f %.4f %.4f\n", width, height, colours.size(), non_white / n, blue / n, red / n);
  return 0;
}
