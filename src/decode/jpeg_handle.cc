#include "decode/jpeg_handle.h"

#include <jerror.h>

#include <cstring>

namespace stoker::internal {

namespace {

void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jmp, 1);
}

bool is_corrupt_data_warning(int code) {
  switch (code) {
    case JWRN_ARITH_BAD_CODE:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_EXTRANEOUS_DATA:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_JPEG_EOF:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_TOO_MUCH_DATA:
      return true;
    default:
      return false;
  }
}

void on_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  if (!is_corrupt_data_warning(cinfo->err->msg_code)) return;
  auto* err = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jmp, 1);
}

void on_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->progressive_mode && d->input_scan_number > kMaxScans) {
    auto* err = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message),
                  "progressive JPEG has more than %d scans", kMaxScans);
    longjmp(err->jmp, 1);
  }
}

}  // namespace

jpeg_error_mgr* install_error_mgr(JpegErrorMgr& err) {
  jpeg_error_mgr* pub = jpeg_std_error(&err.pub);
  pub->error_exit = on_error_exit;
  pub->emit_message = on_emit_message;
  err.message[0] = '\0';
  return pub;
}

void install_scan_limit(jpeg_progress_mgr& mgr) {
  std::memset(&mgr, 0, sizeof(mgr));
  mgr.progress_monitor = on_progress;
}

void throw_jpeg_error(const char* what, const char* message) {
  throw Error(ErrorCode::kDataLoss, std::string(what) + ": corrupt JPEG: " + message);
}

JpegDecompressor::JpegDecompressor() {
  std::memset(&cinfo_, 0, sizeof(cinfo_));
  cinfo_.err = install_error_mgr(err_);
  jpeg_guarded(err_, "jpeg_create_decompress", [&] { jpeg_create_decompress(&cinfo_); });
  install_scan_limit(progress_);
  cinfo_.progress = &progress_;
}

JpegDecompressor::~JpegDecompressor() { jpeg_destroy_decompress(&cinfo_); }

void require_soi(const uint8_t* data, size_t size) {
  if (size == 0) throw Error(ErrorCode::kDataLoss, "not a JPEG: empty input");
  if (size < 2 || data[0] != 0xFF || data[1] != 0xD8) {
    throw Error(ErrorCode::kDataLoss, "not a JPEG: missing SOI marker (FF D8)");
  }
}

void read_jpeg_header(JpegDecompressor& dec, std::span<const uint8_t> jpeg, const char* what) {
  jpeg_decompress_struct* c = dec.get();
  jpeg_guarded(dec.err(), what, [&] {
    jpeg_mem_src(c, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
    jpeg_read_header(c, TRUE);
  });
}

}  // namespace stoker::internal
