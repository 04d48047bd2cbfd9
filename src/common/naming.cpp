#include "common/naming.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "ipcring/error.hpp"

namespace ipcring {

void validate_name(std::string_view name) {
  if (name.empty()) {
    throw Error(Errc::invalid_name, "ipcring: channel name is empty");
  }
  if (name.size() > detail::kMaxNameLength) {
    throw Error(Errc::invalid_name, "ipcring: channel name '" + std::string(name.substr(0, 40)) +
                                        "...' is " + std::to_string(name.size()) +
                                        " characters long; at most " +
                                        std::to_string(detail::kMaxNameLength) + " are allowed");
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) {
      throw Error(Errc::invalid_name,
                  "ipcring: channel name '" + std::string(name) + "' has character " +
                      format_hex(static_cast<unsigned char>(c), 2) + " at position " +
                      std::to_string(i) + "; allowed are letters, digits, '_' and '-'");
    }
  }
}

std::string object_name(std::string_view channel) {
  return std::string(detail::kObjectPrefix) + std::string(channel);
}

std::string object_path(std::string_view channel) {
  return detail::shm_path(object_name(channel));
}

std::optional<std::string> channel_of_object(std::string_view object) {
  if (!object.starts_with(detail::kObjectPrefix)) return std::nullopt;
  object.remove_prefix(detail::kObjectPrefix.size());
  if (object.empty() || object.ends_with(detail::kLegacyFramesSuffix)) return std::nullopt;
  return std::string(object);
}

std::string legacy_frames_object_name(std::string_view channel) {
  return object_name(channel) + std::string(detail::kLegacyFramesSuffix);
}

std::string legacy_frames_object_path(std::string_view channel) {
  return detail::shm_path(legacy_frames_object_name(channel));
}

std::optional<std::string> channel_of_legacy_frames(std::string_view object) {
  if (!object.starts_with(detail::kObjectPrefix) ||
      !object.ends_with(detail::kLegacyFramesSuffix)) {
    return std::nullopt;
  }
  object.remove_prefix(detail::kObjectPrefix.size());
  object.remove_suffix(detail::kLegacyFramesSuffix.size());
  if (object.empty()) return std::nullopt;
  return std::string(object);
}

namespace {

template <class Inverse>
std::vector<std::string> list_by(Inverse inverse) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(detail::kShmDirectory, ec)) {
    if (auto channel = inverse(entry.path().filename().string())) {
      names.push_back(std::move(*channel));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::vector<std::string> list_channels() {
  return list_by([](const std::string& file) { return channel_of_object(file); });
}

std::vector<std::string> list_orphaned_legacy_frames() {
  return list_by([](const std::string& file) -> std::optional<std::string> {
    auto channel = channel_of_legacy_frames(file);
    std::error_code ec;
    if (!channel || std::filesystem::exists(object_path(*channel), ec) || ec) return std::nullopt;
    return channel;
  });
}

}  // namespace ipcring

namespace ipcring::detail {

std::string shm_path(std::string_view object) {
  return std::string(kShmDirectory) + "/" + std::string(object);
}

}  // namespace ipcring::detail
