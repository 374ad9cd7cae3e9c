// A C++ trainer's input loop with stoker: open a dataset, iterate an epoch of
// augmented batches, hand each to the "model", give the slot back, resume mid-epoch.
//
//   cpp_trainer DATASET [--epochs N] [--threads N]
//
// Built in-tree, or against an installed stoker with find_package(stoker) (see
// examples/CMakeLists.txt).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stoker/stoker.h>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATASET [--epochs N] [--threads N]\n", argv[0]);
    return 2;
  }
  stoker::LoaderOptions options;
  options.path = argv[1];
  options.batch_size = 32;
  options.transform.kind = stoker::ImageTransform::Kind::kTrain;
  options.transform.size = 224;
  int epochs = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--epochs")) epochs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) options.threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
  }
  try {
    stoker::Loader loader(options);
    std::printf("%llu samples, %llu batches per epoch on rank %d of %d\n",
                static_cast<unsigned long long>(loader.epoch_samples()),
                static_cast<unsigned long long>(loader.num_batches()), loader.rank(), loader.world_size());
    std::string checkpoint;
    for (int e = 0; e < epochs; ++e) {
      loader.set_epoch(static_cast<uint64_t>(e));
      uint64_t pixels = 0, batches = 0;
      while (auto batch = loader.next()) {
        const stoker::TensorView& image = (*batch)["image"];  // [B, 224, 224, 3] uint8
        const stoker::TensorView& label = (*batch)["label"];  // [B] int64
        // A real trainer would copy to the device here; we touch the bytes instead.
        const auto* px = static_cast<const uint8_t*>(image.data);
        for (size_t i = 0; i < image.bytes(); i += 4096) pixels += px[i];
        (void)label;
        batch->release();  // the slot goes back to the loader's ring
        if (++batches == loader.num_batches() / 2) checkpoint = loader.state().serialize();
      }
      std::printf("epoch %d: %llu batches; %s\n", e, static_cast<unsigned long long>(batches),
                  loader.stats().summary().c_str());
      (void)pixels;
    }
    // Resume from the mid-epoch checkpoint, as after a restart.
    if (!checkpoint.empty()) {
      loader.load_state(stoker::OrderState::parse(checkpoint));
      uint64_t rest = 0;
      while (auto batch = loader.next()) ++rest;
      std::printf("resumed from \"%s\": %llu batches left\n", checkpoint.c_str(), static_cast<unsigned long long>(rest));
    }
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "stoker: %s: %s\n", stoker::error_code_name(e.code()), e.what());
    return 1;
  }
  return 0;
}
