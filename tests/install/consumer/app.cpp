// A program outside the ipcring tree: publishes one frame and reads it back.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <ipcring/ipcring.hpp>

// `app --cuda`: asks for Backend::cuda. With a GPU it must work; without one (or without a driver,
// or with the CUDA Toolkit hidden) it must fail with Errc::unsupported and say why, never crash.
int cuda_check() {
  const std::string name = "consumer-cuda-" + std::to_string(getpid());
  try {
    auto producer = ipcring::Producer::create(
        name, {.slots = 4, .max_readers = 1, .frame_bytes = 64, .backend = ipcring::Backend::cuda});
    std::printf("Backend::cuda works here (a GPU is present)\n");
    return 0;
  } catch (const ipcring::Error& e) {
    std::printf("Backend::cuda: %s\n", e.what());
    return e.code() == ipcring::Errc::unsupported ? 0 : 3;
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--cuda") == 0) return cuda_check();
  const std::string name = "consumer-" + std::to_string(getpid());
  auto producer =
      ipcring::Producer::create(name, {.slots = 4, .max_readers = 1, .frame_bytes = 64});
  auto reader = ipcring::Reader::attach(name);
  auto loan = producer.loan();
  if (!loan) return 1;
  std::memcpy(loan->data(), "hello", 6);
  producer.publish(std::move(*loan), 6);
  auto frame = reader.try_read();
  if (!frame || std::strcmp(reinterpret_cast<const char*>(frame->data()), "hello") != 0) return 2;
  std::printf("consumer read '%s' (layout version %u)\n",
              reinterpret_cast<const char*>(frame->data()), ipcring::layout_version());
  return 0;
}
