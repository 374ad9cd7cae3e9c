// Writes tar archives byte by byte for the tar reader and WebDataset packer tests:
// ustar headers (with prefix), GNU long names ('L') and pax headers ('x'), so the
// tests do not depend on a tar binary.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace stoker::testing {

class TarBuilder {
 public:
  /// Appends one header block (checksum filled in) and returns its offset.
  size_t header(const std::string& name, uint64_t size, char type = '0', const std::string& prefix = "",
                bool gnu_magic = false) {
    uint8_t h[512] = {};
    std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
    std::snprintf(reinterpret_cast<char*>(h + 100), 8, "%07o", 0644);
    std::snprintf(reinterpret_cast<char*>(h + 108), 8, "%07o", 0);
    std::snprintf(reinterpret_cast<char*>(h + 116), 8, "%07o", 0);
    std::snprintf(reinterpret_cast<char*>(h + 124), 12, "%011llo", static_cast<unsigned long long>(size));
    std::snprintf(reinterpret_cast<char*>(h + 136), 12, "%011o", 0);
    h[156] = static_cast<uint8_t>(type);
    if (gnu_magic) std::memcpy(h + 257, "ustar  ", 8);
    else std::memcpy(h + 257, "ustar\0" "00", 8);
    std::memcpy(h + 345, prefix.data(), std::min<size_t>(prefix.size(), 155));
    set_checksum(h);
    size_t at = bytes.size();
    bytes.insert(bytes.end(), h, h + 512);
    return at;
  }
  static void set_checksum(uint8_t* h) {
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; ++i) sum += h[i];
    std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
    h[155] = ' ';
  }
  void data(const std::vector<uint8_t>& d) {
    bytes.insert(bytes.end(), d.begin(), d.end());
    bytes.resize((bytes.size() + 511) / 512 * 512, 0);
  }
  void data(const std::string& s) { data(std::vector<uint8_t>(s.begin(), s.end())); }
  /// A regular file.
  size_t file(const std::string& name, const std::vector<uint8_t>& d, const std::string& prefix = "") {
    size_t at = header(name, d.size(), '0', prefix);
    data(d);
    return at;
  }
  size_t file(const std::string& name, const std::string& s) {
    return file(name, std::vector<uint8_t>(s.begin(), s.end()));
  }
  /// A regular file whose name travels in a GNU long-name member.
  void gnu_long_file(const std::string& name, const std::vector<uint8_t>& d) {
    std::string n = name + '\0';
    header("././@LongLink", n.size(), 'L', "", true);
    data(n);
    header(name.substr(0, 99), d.size(), '0', "", true);
    data(d);
  }
  /// A regular file whose name travels in a pax 'path' record.
  void pax_file(const std::string& name, const std::vector<uint8_t>& d, const std::string& stub = "PaxHeader") {
    std::string rec = " path=" + name + "\n";
    size_t len = rec.size() + 1;
    while (std::to_string(len).size() + rec.size() != len) ++len;
    std::string pax = std::to_string(len) + rec;
    header("PaxHeaders/" + stub, pax.size(), 'x');
    data(pax);
    header(stub, d.size(), '0');
    data(d);
  }
  void end() { bytes.resize(bytes.size() + 1024, 0); }

  std::vector<uint8_t> bytes;
};

}  // namespace stoker::testing
