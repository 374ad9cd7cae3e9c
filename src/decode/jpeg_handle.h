// RAII wrappers of libjpeg's decompress/compress structs with a longjmp error manager.
//
// libjpeg reports fatal errors through error_exit, which must not return; we longjmp
// back to the innermost guarded() call and throw stoker::Error(kDataLoss) from there.
// Warnings that mean the data is corrupt (bad Huffman code, premature end of file,
// extraneous bytes, ...) are treated the same way; benign warnings (unknown JFIF
// revision, odd Adobe transform code) are ignored. A progressive file with more than
// kMaxScans scans is rejected (a few hundred bytes can otherwise cost seconds).
//
// Rule for the callables passed to guarded(): they call libjpeg and may hold only
// trivially destructible locals, since a longjmp skips their frames.
#pragma once

// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include <jpeglib.h>
#include <setjmp.h>

#include "stoker/error.h"

namespace stoker::internal {

constexpr int kMaxScans = 500;

struct JpegErrorMgr {
  jpeg_error_mgr pub;
  jmp_buf jmp;
  char message[JMSG_LENGTH_MAX];
};

/// Installs stoker's handlers in `err` and returns &err.pub for cinfo.err.
jpeg_error_mgr* install_error_mgr(JpegErrorMgr& err);

/// Makes `mgr` the progress monitor that enforces kMaxScans.
void install_scan_limit(jpeg_progress_mgr& mgr);

/// Runs `f` with `err.jmp` armed; a libjpeg error or corrupt-data warning inside `f`
/// becomes stoker::Error(kDataLoss, what + ": " + libjpeg's message).
template <class F>
void jpeg_guarded(JpegErrorMgr& err, const char* what, F&& f);

[[noreturn]] void throw_jpeg_error(const char* what, const char* message);

// setjmp must be called in a frame that is still live when longjmp runs: this function
// is that frame (GCC never inlines a function calling setjmp into one that returns).
template <class F>
__attribute__((noinline)) void jpeg_guarded(JpegErrorMgr& err, const char* what, F&& f) {
  if (setjmp(err.jmp) != 0) throw_jpeg_error(what, err.message);
  f();
}

/// Owns a jpeg_decompress_struct. Non-copyable, non-movable (libjpeg keeps pointers to
/// the error manager).
class JpegDecompressor {
 public:
  JpegDecompressor();
  ~JpegDecompressor();
  JpegDecompressor(const JpegDecompressor&) = delete;
  JpegDecompressor& operator=(const JpegDecompressor&) = delete;

  jpeg_decompress_struct* get() { return &cinfo_; }
  JpegErrorMgr& err() { return err_; }
  /// Returns the struct to its idle state (after success or a longjmp).
  void abort() { jpeg_abort_decompress(&cinfo_); }

 private:
  JpegErrorMgr err_;
  jpeg_progress_mgr progress_;
  jpeg_decompress_struct cinfo_;
};

/// Calls JpegDecompressor::abort() when it goes out of scope.
class JpegAbortGuard {
 public:
  explicit JpegAbortGuard(JpegDecompressor& d) : d_(d) {}
  ~JpegAbortGuard() { d_.abort(); }
  JpegAbortGuard(const JpegAbortGuard&) = delete;
  JpegAbortGuard& operator=(const JpegAbortGuard&) = delete;

 private:
  JpegDecompressor& d_;
};

/// kDataLoss unless the bytes start with the SOI marker (FF D8).
void require_soi(const uint8_t* data, size_t size);

/// Points `dec` at `jpeg` (which must outlive its use) and reads the header under the
/// error guard: kDataLoss naming `what` when libjpeg rejects it. The caller owns the
/// abort (a JpegAbortGuard).
void read_jpeg_header(JpegDecompressor& dec, std::span<const uint8_t> jpeg, const char* what);

}  // namespace stoker::internal
