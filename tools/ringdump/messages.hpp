// messages.hpp — how ringdump record writes frames into MCAP, and how play and serve read them
// back: CDR (little-endian, the ROS 2 / DDS encoding) of two ros2msg schemas.
//
//   sensor_msgs/msg/Image   image-like frames: a uint8 tensor of shape (H, W) or (H, W, C) with an
//                           encoding (mono8, rgb8, bgr8, rgba8, bgra8): what rosbag2 writes, so
//                           Foxglove, Lichtblick and `ros2 bag` show them.
//   ipcring/msg/Frame       every other frame: sequence, publish and capture times, the
//                           TensorDesc, the metadata and the payload (see kFrameSchema).
//
// The decoders take bytes from a file or a socket: every length is checked against what is left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ipcring/frame.hpp"
#include "ipcring/tensor.hpp"
#include "ringdump/buffer.hpp"

namespace ringdump::messages {

using ringdump::Buffer;

inline constexpr std::string_view kImageSchemaName = "sensor_msgs/msg/Image";
inline constexpr std::string_view kFrameSchemaName = "ipcring/msg/Frame";
extern const char* const kImageSchema;  // ros2msg text, with its dependencies (as rosbag2 writes)
extern const char* const kFrameSchema;

// Bytes per pixel of an 8-bit image encoding; nullopt for an encoding ringdump does not handle.
std::optional<std::uint32_t> bytes_per_pixel(std::string_view encoding) noexcept;

// The encoding an image-like tensor gets: `requested` when it is non-empty and matches the
// channels (C), else mono8 (C == 1 or 2-D), rgb8 (3), rgba8 (4). nullopt when the tensor is not
// image-like: not uint8, not 2-D or 3-D, not contiguous, or C not 1, 3 or 4 (or not the
// requested encoding's).
std::optional<std::string> image_encoding(const ipcring::TensorDesc& t, std::string_view requested);

// What a frame carries, from whichever schema.
struct FrameFields {
  std::uint64_t sequence = 0;
  std::uint64_t timestamp_ns = 0;     // publish time, CLOCK_MONOTONIC of the recording machine
  std::uint64_t capture_time_ns = 0;  // 0: none
  std::optional<ipcring::TensorDesc> tensor;
  std::span<const std::byte> metadata;
  std::span<const std::byte> data;
  std::string encoding;  // images only
};

// Appends a CDR sensor_msgs/msg/Image of `pixels` (height * width * bytes_per_pixel(encoding)
// bytes, rows contiguous) to `out`. `stamp_ns`: the header's stamp (UNIX time).
void encode_image(Buffer& out, std::uint64_t stamp_ns, std::string_view frame_id,
                  std::uint32_t height, std::uint32_t width, std::string_view encoding,
                  std::span<const std::byte> pixels);
// Appends a CDR ipcring/msg/Frame.
void encode_frame(Buffer& out, const FrameFields& f);

// A held frame as its message: an Image when its tensor is image-like (image_encoding with
// `requested`), else a Frame. `stamp_ns`: the Image header's stamp. Returns the Image's encoding,
// or std::nullopt for a Frame. The payload is read from `payload` (f.size() bytes: a CUDA frame's
// host copy), or from f.data() when it is nullptr (host frames).
std::optional<std::string> encode(Buffer& out, const ipcring::Frame& f, std::string_view topic,
                                  std::string_view requested, std::uint64_t stamp_ns,
                                  const std::byte* payload = nullptr);

// Decode; on failure std::nullopt with `error` saying what was wrong (field and values). The
// spans of the result point into `cdr`.
std::optional<FrameFields> decode_image(std::span<const std::byte> cdr, std::string& error);
std::optional<FrameFields> decode_frame(std::span<const std::byte> cdr, std::string& error);

}  // namespace ringdump::messages
