// wire.hpp — ipcring frames to DDS samples and back, and the checks a received sample must pass
// before it is published into a channel. No DDS calls here: the tests drive these directly.
//
// Two wire types (idl/): ipcring::bridge::Frame carries everything a frame has (payload,
// sequence, epoch, publish time, metadata, tensor description, capture time), and ROS 2's
// sensor_msgs/msg/Image for image-shaped uint8 frames.
//
// Borrowing: the fill_* functions point the sample's sequences at the frame's bytes (no copy,
// _release = false); the sample is valid while the frame is held. dds_write serialises it, which
// is the one copy on the sending side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ipcring/tensor.hpp"
#include "ipcring_frame.h"
#include "ros2_image.h"

namespace ipcring::bridge {

// Why a received sample was dropped (or ok).
enum class Verdict {
  ok,
  too_large,     // payload larger than the local channel's frame_bytes
  bad_metadata,  // more metadata than a frame can carry (kMaxMetadataBytes)
  bad_tensor,    // tensor description out of range (ndim > 8)
  bad_shape,     // image: step, height, width, encoding and data length disagree
  not_image,     // export --ros2: the frame is not image-shaped for the given format
  bad_encoding,  // the serialised sample is not CDR of its type (cut, lengths past its end)
};
const char* to_string(Verdict v) noexcept;

// An image format for --ros2: encoding (sensor_msgs/image_encodings.hpp names), width, height.
// As export's flags, an empty encoding or a zero width or height means "from the frame's tensor"
// (image_format_of); step 0 means width * bytes per pixel.
struct ImageFormat {
  std::string encoding;
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::uint32_t step = 0;         // bytes from one row to the next (0: width * bytes per pixel)
  std::uint64_t byte_offset = 0;  // where row 0 starts in the frame
};

// Bytes per pixel of the 8-bit encodings ringbridge handles; nullopt for the others.
std::optional<std::uint32_t> bytes_per_pixel(std::string_view encoding) noexcept;

// What the sender knows about a frame (read from the channel).
struct FrameView {
  std::span<const std::byte> data;
  std::span<const std::byte> metadata;
  std::uint64_t sequence = 0;
  std::uint64_t epoch = 0;
  std::uint64_t publish_time_ns = 0;  // CLOCK_MONOTONIC of this machine
  std::uint64_t capture_time_ns = 0;  // the producer's; 0: not set
  std::optional<TensorDesc> tensor;   // the producer's tensor description, if any
};

// The image a frame is, for export --ros2: what the flags give (width, height, encoding), the
// rest from the frame's tensor when it is a uint8 (H, W) or (H, W, C) image with C in 1..4 and
// rows of whole pixels (a row stride of at least W * C elements, pixels C apart, channels 1
// apart): width W, height H, step = the row stride, encoding mono8, 8UC2, rgb8 or rgba8 by C
// unless given. nullopt when neither says a width and a height, or they disagree on the pixel
// size (a given encoding of another C than the tensor's).
std::optional<ImageFormat> image_format_of(const ImageFormat& flags,
                                           const std::optional<TensorDesc>& tensor) noexcept;

// ---- sending --------------------------------------------------------------------------------
// `channel` must outlive the call (copied into the fixed-size field, cut at 200 bytes).
void fill_frame_sample(ipcring_bridge_Frame& sample, const FrameView& frame,
                       std::string_view channel, std::uint64_t send_realtime_ns) noexcept;

// ok, or not_image when frame.data is not height * width * bytes_per_pixel(encoding) bytes (with
// format.step set: when the frame has fewer than byte_offset + step * height bytes; the rows are
// sent from byte_offset on, step bytes each, as Image.step says).
// `encoding` and `frame_id` are borrowed (must outlive the sample).
Verdict fill_image_sample(sensor_msgs_msg_dds__Image_& sample, const FrameView& frame,
                          const ImageFormat& format, const std::string& frame_id,
                          std::uint64_t stamp_realtime_ns) noexcept;

// ---- receiving ------------------------------------------------------------------------------
// The import takes each sample as Cyclone received it (dds_takecdr) and decodes it in place, so
// the payload is copied once, from Cyclone's buffer into the channel's loan, with no deserialised
// sample in between. The bytes are what Cyclone writes for these @final types: a 4-byte
// encapsulation header (plain CDR: XCDR1 or XCDR2, big- or little-endian), then the fields in IDL
// order, each aligned to its size counted from the end of the header (8-byte fields to 8 in XCDR1,
// to 4 in XCDR2); strings are a uint32 length including the NUL, the bytes and the NUL; sequences
// a uint32 count and the elements. Nothing in them is trusted: a length past the end, a string
// without its NUL or longer than its bound, a boolean other than 0 or 1, an unknown header or more
// than 3 bytes of padding after the last field give bad_encoding.
// On ok the sample's sequences borrow from `cdr` (_release = false) and its strings point into it
// (Frame.channel is copied): valid while `cdr` is. check_frame_sample / check_image_sample follow.
Verdict decode_frame_sample(std::span<const std::byte> cdr, ipcring_bridge_Frame& sample) noexcept;
Verdict decode_image_sample(std::span<const std::byte> cdr,
                            sensor_msgs_msg_dds__Image_& sample) noexcept;

Verdict check_frame_sample(const ipcring_bridge_Frame& sample, std::size_t capacity) noexcept;
// The tensor description a checked sample carries (nullopt: none). The receiving loan validates
// it again against its data (Loan::set_tensor), so a description that does not fit is dropped
// there, never trusted.
std::optional<TensorDesc> sample_tensor(const ipcring_bridge_Frame& sample) noexcept;
Verdict check_image_sample(const sensor_msgs_msg_dds__Image_& sample,
                           std::size_t capacity) noexcept;

// The tensor a checked Image is: (height, width, C) uint8, rows `step` bytes apart, for the
// encodings of bytes_per_pixel (C = its bytes per pixel); nullopt for other encodings.
std::optional<TensorDesc> image_tensor(const sensor_msgs_msg_dds__Image_& sample) noexcept;

// header.stamp in nanoseconds (the sender's capture time; 0 when the stamp is unset or negative).
std::uint64_t image_stamp_ns(const sensor_msgs_msg_dds__Image_& sample) noexcept;

}  // namespace ipcring::bridge
