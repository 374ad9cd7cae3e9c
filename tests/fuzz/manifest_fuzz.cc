// libFuzzer target: arbitrary text as a manifest. Parsing must never crash; when the
// text carries a valid checksum (the fuzzer is helped by fixing it up) the parser's
// line checks are exercised too.
#include <cstdint>
#include <cstdio>
#include <string>

#include "stoker/crc32c.h"
#include "stoker/dataset.h"
#include "stoker/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    stoker::Manifest::parse(text, "fuzz");
  } catch (const stoker::Error&) {
  }
  // Same body with a correct checksum line, so the fuzzer reaches the line parser.
  if (!text.empty() && text.back() != '\n') text += '\n';
  char crc[32];
  std::snprintf(crc, sizeof crc, "crc32c %08x\n", stoker::crc32c(text.data(), text.size()));
  text += crc;
  try {
    stoker::Manifest m = stoker::Manifest::parse(text, "fuzz");
    // Whatever parses must serialise and parse back to the same thing.
    stoker::Manifest back = stoker::Manifest::parse(m.serialize(), "fuzz");
    if (back.version != m.version || !(back.schema == m.schema) || back.class_names != m.class_names || back.shards != m.shards || back.meta != m.meta)
      __builtin_trap();
  } catch (const stoker::Error&) {
  }
  return 0;
}
