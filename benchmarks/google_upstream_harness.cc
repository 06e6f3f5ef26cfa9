// Asks Google's own robots.txt matcher (github.com/google/robotstxt, robots.cc)
// for verdicts; built and driven by benchmarks/google_upstream.py, which names
// the directory of robots.cc/robots.h. This file is scrapy-rep's own: Google's
// source is compiled from where it lies, never copied here.
//
// stdin, repeated until EOF:  'B' <u32 size> <robots.txt bytes>   (the body asked next)
//                             'Q' <u32 count> (<u32 size> <url bytes>) * count
// stdout, per 'Q': count bytes, '1' allowed / '0' disallowed, then a flush.
// The product token is argv[1]. Sizes are little-endian.

#include <cstdint>
#include <cstdio>
#include <string>

#include "robots.h"

namespace {

bool ReadExact(std::string* out, uint32_t size) {
  out->resize(size);
  return size == 0 || std::fread(&(*out)[0], 1, size, stdin) == size;
}

bool ReadSize(uint32_t* size) {
  unsigned char raw[4];
  if (std::fread(raw, 1, 4, stdin) != 4) return false;
  *size = raw[0] | (raw[1] << 8) | (raw[2] << 16) | (uint32_t(raw[3]) << 24);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PRODUCT_TOKEN < records\n", argv[0]);
    return 2;
  }
  const std::string agent = argv[1];
  std::string body, url, answers;
  int kind;
  while ((kind = std::fgetc(stdin)) != EOF) {
    uint32_t size;
    if (!ReadSize(&size)) return 3;
    if (kind == 'B') {
      if (!ReadExact(&body, size)) return 3;
    } else if (kind == 'Q') {
      answers.clear();
      for (uint32_t i = 0; i < size; ++i) {
        uint32_t url_size;
        if (!ReadSize(&url_size) || !ReadExact(&url, url_size)) return 3;
        googlebot::RobotsMatcher matcher;  // one per question, as robots_main.cc does
        answers += matcher.OneAgentAllowedByRobots(body, agent, url) ? '1' : '0';
      }
      std::fwrite(answers.data(), 1, answers.size(), stdout);
      std::fflush(stdout);
    } else {
      std::fprintf(stderr, "unknown record %d\n", kind);
      return 3;
    }
  }
  return 0;
}
