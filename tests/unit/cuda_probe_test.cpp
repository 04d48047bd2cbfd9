// cuda_probe_test.cpp — ipcring::probe_cuda (ringdump doctor's CUDA check) through the fake CUDA:
// every reason the backend would refuse a device is listed, not only the first one it throws.
#include <doctest/doctest.h>

#include <string>

#include "backend/cuda/cuda_capability.hpp"
#include "backend/cuda/cuda_pool.hpp"
#include "ipcring/ipcring.hpp"
#include "unit/fake_cuda.hpp"

using namespace ipcring;
using test::FakeDevice;
using test::FakeGpuWorld;

namespace {

struct UseFake {
  explicit UseFake(std::shared_ptr<test::FakeCuda> api) {
    detail::set_cuda_api_for_testing(std::move(api));
  }
  ~UseFake() { detail::set_cuda_api_for_testing(nullptr); }
  UseFake(const UseFake&) = delete;
  UseFake& operator=(const UseFake&) = delete;
};

bool mentions(const std::vector<std::string>& all, const std::string& what) {
  for (const auto& s : all) {
    if (s.find(what) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("probe_cuda: a discrete GPU with everything the legacy path needs") {
  auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
  UseFake use(world->process());
  const CudaProbe p = probe_cuda();
  CHECK(p.module_loaded);
  CHECK(p.device_problem.empty());
  REQUIRE(p.devices.size() == 1);
  const auto& d = p.devices[0];
  CHECK(d.ordinal == 0);
  CHECK(d.uuid == "GPU-a1a1a1a1-a1a1-a1a1-a1a1-a1a1a1a1a1a1");
  CHECK(d.integrated == false);
  CHECK(d.stream_mem_ops_64 == true);
  CHECK(d.host_register == true);
  CHECK(d.ipc_events == true);
  CHECK(d.compute_mode == 0);
  CHECK(d.vmm_posix_fd == true);
  CHECK(d.legacy_ipc_refusals.empty());
}

TEST_CASE("probe_cuda: an integrated GPU without stream memory operations: every reason") {
  FakeDevice orin = FakeGpuWorld::device(0xb2);
  orin.integrated = true;
  orin.stream_mem_ops = false;
  orin.host_register = false;
  orin.vmm_posix_fd = false;
  FakeDevice exclusive = FakeGpuWorld::device(0xc3);
  exclusive.compute_mode = 3;
  auto world = FakeGpuWorld::make({orin, exclusive});
  auto api = world->process();
  UseFake use(api);
  const CudaProbe p = probe_cuda();
  REQUIRE(p.devices.size() == 2);
  const auto& r = p.devices[0].legacy_ipc_refusals;
  CHECK(r.size() == 3);
  CHECK(mentions(r, "integrated GPU"));
  CHECK(mentions(r, "64-bit stream memory operations"));
  CHECK(mentions(r, "cudaHostRegister"));
  CHECK(p.devices[0].integrated == true);
  CHECK(p.devices[0].stream_mem_ops_64 == false);
  CHECK(p.devices[0].host_register == false);
  CHECK(p.devices[0].vmm_posix_fd == false);
  CHECK(p.devices[1].vmm_posix_fd == true);
  REQUIRE(p.devices[1].legacy_ipc_refusals.size() == 1);
  CHECK(mentions(p.devices[1].legacy_ipc_refusals, "exclusive-process"));
  // The create-time probe still throws the first reason, as before.
  try {
    detail::cuda::probe_ipc_support(*api, 0, "ipcring: channel 'x': ");
    FAIL("probe_ipc_support accepted an integrated GPU");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
    CHECK(std::string(e.what()).find("integrated GPU") != std::string::npos);
  }
}

TEST_CASE("probe_cuda: no driver, and no device") {
  SUBCASE("no driver") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)}, false);
    UseFake use(world->process());
    const CudaProbe p = probe_cuda();
    CHECK(p.module_loaded);
    CHECK(p.devices.empty());
    CHECK(p.device_problem.find("NVIDIA driver") != std::string::npos);
  }
  SUBCASE("no device") {
    auto world = FakeGpuWorld::make({});
    UseFake use(world->process());
    const CudaProbe p = probe_cuda();
    CHECK(p.devices.empty());
    CHECK(p.device_problem.find("sees none") != std::string::npos);
  }
}
