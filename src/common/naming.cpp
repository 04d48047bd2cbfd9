#include "common/naming.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "ipcring/error.hpp"

namespace ipcring {

namespace {

[[noreturn]] void bad_name(std::string_view name, const std::string& why) {
  std::string shown(name.substr(0, 60));
  if (name.size() > 60) shown += "...";
  throw Error(Errc::invalid_name, "ipcring: channel name '" + shown + "' " + why);
}

bool name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

}  // namespace

void validate_name(std::string_view name) {
  if (name.empty()) throw Error(Errc::invalid_name, "ipcring: channel name is empty");
  if (name.size() > kMaxNameLength) {
    bad_name(name, "is " + std::to_string(name.size()) + " characters long; at most " +
                       std::to_string(kMaxNameLength) + " are allowed");
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c != '/' && !name_char(c)) {
      bad_name(name, "has character " + format_hex(static_cast<unsigned char>(c), 2) +
                         " at position " + std::to_string(i) +
                         "; allowed are letters, digits, '_', '-', '.' and '/' between parts");
    }
  }
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string_view part = name.substr(start, end - start);
    if (part.empty()) {
      bad_name(name, "has an empty part at position " + std::to_string(start) +
                         " (no leading, trailing or double '/')");
    }
    if (part == "." || part == "..") {
      bad_name(name, "has a part '" + std::string(part) + "'; '.' and '..' are not names");
    }
    if (end == name.size()) {
      if (part.size() > kMaxLeafLength) {
        bad_name(name, "has a last part of " + std::to_string(part.size()) +
                           " characters; at most " + std::to_string(kMaxLeafLength) +
                           " are allowed (it names a unix socket)");
      }
      return;
    }
    start = end + 1;
  }
}

std::string channel_directory(std::string_view dir) {
  if (!dir.empty()) return std::string(dir);
  // Only read; the tools set it while parsing, before any thread, and a program that changes its
  // environment while threads run breaks getenv anyway.
  const std::string variable(detail::kDirectoryVariable);
  if (const char* env = std::getenv(variable.c_str());  // NOLINT(concurrency-mt-unsafe)
      env != nullptr && *env != '\0') {
    return env;
  }
  return std::string(detail::kDefaultDirectoryBase) + std::to_string(geteuid());
}

std::string lock_path(std::string_view channel, std::string_view dir) {
  return channel_directory(dir) + "/" + std::string(channel) + std::string(detail::kLockSuffix);
}

std::string socket_path(std::string_view channel, std::string_view dir) {
  return channel_directory(dir) + "/" + std::string(channel) + std::string(detail::kSocketSuffix);
}

std::optional<std::string> channel_of_lock(std::string_view relative_path) {
  if (!relative_path.ends_with(detail::kLockSuffix)) return std::nullopt;
  relative_path.remove_suffix(detail::kLockSuffix.size());
  try {
    validate_name(relative_path);
  } catch (const Error&) {
    return std::nullopt;
  }
  return std::string(relative_path);
}

std::vector<std::string> list_channels(std::string_view dir) {
  std::vector<std::string> names;
  const std::filesystem::path base(channel_directory(dir));
  std::error_code ec;
  // Symbolic links are neither followed nor listed; the depth is bounded by the name's length.
  std::filesystem::recursive_directory_iterator it(
      base, std::filesystem::directory_options::skip_permission_denied, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() > static_cast<int>(kMaxNameLength / 2)) {
      it.disable_recursion_pending();
      continue;
    }
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec) || it->is_symlink(type_ec)) continue;
    const std::string relative = it->path().lexically_relative(base).string();
    if (auto channel = channel_of_lock(relative)) names.push_back(std::move(*channel));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ipcring

namespace ipcring::detail {

std::string_view name_leaf(std::string_view channel) noexcept {
  const std::size_t slash = channel.rfind('/');
  return slash == std::string_view::npos ? channel : channel.substr(slash + 1);
}

std::string_view name_parent(std::string_view channel) noexcept {
  const std::size_t slash = channel.rfind('/');
  return slash == std::string_view::npos ? std::string_view{} : channel.substr(0, slash);
}

}  // namespace ipcring::detail
