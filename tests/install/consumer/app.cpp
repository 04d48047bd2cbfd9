// A program outside the ipcring tree: publishes one frame and reads it back.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <ipcring/ipcring.hpp>

int main() {
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
