// cuda_loader.cpp — loads libipcring_cuda.so (the CUDA runtime binding) on first use of
// Backend::cuda. See cuda_plugin.hpp for what the module is and where it is looked for.
//
// Loaded once per process (std::call_once), with RTLD_NOW | RTLD_LOCAL: its statically linked CUDA
// runtime stays private to it (the module is linked with -Bsymbolic and --exclude-libs,ALL, so a
// libcudart.so another library of the process loaded, of whatever version, is never bound to it).
// Never unloaded: pools and mappings keep using its CudaApi until the process exits.
#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_plugin.hpp"
#include "backend/cuda/cuda_pool.hpp"

#ifndef IPCRING_INSTALL_LIBDIR
#define IPCRING_INSTALL_LIBDIR ""
#endif

namespace ipcring::detail {

namespace {

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  // Read once, under std::call_once; nothing in ipcring writes the environment.
  if (const char* env = std::getenv("IPCRING_CUDA_PLUGIN");  // NOLINT(concurrency-mt-unsafe)
      env != nullptr && *env != '\0') {
    out.emplace_back(env);
    return out;  // explicit: nothing else is tried, so a wrong path is reported, not bypassed
  }
  Dl_info info{};
  // The object this function was linked into: libipcring.so, or the executable / extension that
  // a static libipcring is part of.
  if (dladdr(reinterpret_cast<void*>(&load_cuda_plugin), &info) != 0 && info.dli_fname != nullptr &&
      *info.dli_fname != '\0') {
    const std::string dir = directory_of(info.dli_fname);
    // "/../../../": an installed Python extension (lib/python3.X/dist-packages/ipcring/).
    for (const char* rel : {"/", "/../lib/", "/../../lib/", "/../../../"}) {
      out.push_back(dir + rel + kCudaPluginFile);
    }
  }
  if (*IPCRING_INSTALL_LIBDIR != '\0') {
    out.push_back(std::string(IPCRING_INSTALL_LIBDIR) + "/" + kCudaPluginFile);
  }
  out.emplace_back(kCudaPluginFile);
  return out;
}

struct Loaded {
  CudaApi* api = nullptr;
  std::string why;
};

Loaded load_once() {
  Loaded result;
  std::string tried;
  for (const std::string& path : candidates()) {
    void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module == nullptr) {
      const char* err = dlerror();  // NOLINT(concurrency-mt-unsafe): under std::call_once
      // A candidate that does not exist is expected; say so briefly.
      tried += "\n  " + path + ": " + (err != nullptr ? err : "not loadable");
      continue;
    }
    auto* entry = reinterpret_cast<CudaPluginEntry>(dlsym(module, kCudaPluginEntry));
    if (entry == nullptr) {
      tried += "\n  " + path + ": no symbol " + kCudaPluginEntry + " (not an ipcring CUDA module)";
      continue;  // not ours; leave it loaded (unloading a foreign library is not our business)
    }
    const char* why = nullptr;
    CudaApi* api = entry(kCudaPluginAbi, &why);
    if (api == nullptr) {
      tried += "\n  " + path + ": " + (why != nullptr ? why : "refused");
      continue;
    }
    result.api = api;
    return result;
  }
  result.why = std::string("the CUDA backend module ") + kCudaPluginFile +
               " could not be loaded (it is built only when ipcring is configured with a CUDA "
               "Toolkit; set IPCRING_CUDA_PLUGIN to its path if it lives elsewhere). Tried:" +
               tried;
  return result;
}

}  // namespace

std::shared_ptr<CudaApi> load_cuda_plugin(std::string& why) noexcept {
  try {
    static std::once_flag once;
    static Loaded loaded;
    std::call_once(once, [] { loaded = load_once(); });
    if (loaded.api == nullptr) {
      why = loaded.why;
      return nullptr;
    }
    // Non-owning: the module, and its API object, live until the process exits.
    return std::shared_ptr<CudaApi>(std::shared_ptr<CudaApi>{}, loaded.api);
  } catch (...) {
    why = "out of memory while loading the CUDA backend module";
    return nullptr;
  }
}

std::shared_ptr<CudaApi> cudart_api() noexcept {
  std::string why;
  return load_cuda_plugin(why);
}

}  // namespace ipcring::detail
