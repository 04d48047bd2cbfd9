/* ros2_image_sub.c — a plain Cyclone DDS subscriber of sensor_msgs/msg/Image, in C, as a ROS 2
 * node on another machine would see `ringbridge export --ros2`: DDS topic rt/<T>, type name
 * sensor_msgs::msg::dds_::Image_, best-effort keep-last 5 (ROS 2's sensor-data profile).
 *
 * Usage: ros2_image_sub TOPIC COUNT TIMEOUT_S DOMAIN WIDTH HEIGHT ENCODING FRAME_ID
 * Takes COUNT images (or gives up after TIMEOUT_S) and checks each one: width, height, encoding,
 * step (= width * bytes per pixel), is_bigendian = 0, frame_id, a non-zero stamp, data length
 * (= step * height), and the data itself against ringpub's sequence-derived pattern
 * (tools/pattern.hpp, re-implemented here: the sequence is recovered from the first word).
 * A second reader of the same topic takes the serialised samples (dds_takecdr) and decodes them
 * by hand, field by field in the order and CDR alignment of Image.msg, Header.msg and Time.msg,
 * so the bytes on the wire are checked apart from idlc's view of the type.
 * Prints one line per image and a summary; exit 0 when COUNT good images (and at least one good
 * hand-decoded one, no bad ones) arrived, 1 otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dds/dds.h"
#include "dds/ddsi/ddsi_serdata.h"
#include "ros2_image.h"

static uint64_t pattern_word(uint64_t sequence, uint64_t k) {
  uint64_t x = sequence * 0x9e3779b97f4a7c15ULL + k * 0xbf58476d1ce4e5b9ULL + 1;
  x ^= x >> 31;
  return x;
}

static uint64_t origin_sequence(uint64_t first_word) {
  const uint64_t x = first_word ^ (first_word >> 31) ^ (first_word >> 62);
  uint64_t inv = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 5; ++i) inv *= 2 - 0x9e3779b97f4a7c15ULL * inv;
  return (x - 1) * inv;
}

static int data_matches(const uint8_t* p, uint32_t bytes, uint64_t* sequence) {
  if (bytes < 8) return 0;
  uint64_t w;
  memcpy(&w, p, 8);
  *sequence = origin_sequence(w);
  for (uint32_t k = 0; k < bytes / 8; ++k) {
    memcpy(&w, p + (size_t)k * 8, 8);
    if (w != pattern_word(*sequence, k)) return 0;
  }
  return 1;
}

static uint32_t bytes_per_pixel(const char* e) {
  if (strcmp(e, "mono8") == 0) return 1;
  if (strcmp(e, "rgb8") == 0 || strcmp(e, "bgr8") == 0) return 3;
  if (strcmp(e, "rgba8") == 0 || strcmp(e, "bgra8") == 0) return 4;
  return 0;
}

/* A little-endian CDR reader over one serialised sample (after its 4-byte encapsulation header;
 * alignment counts from the start of the body, as XCDR1 does). */
struct cdr {
  const uint8_t* p;
  uint32_t size, off;
  int ok;
};

static void cdr_align(struct cdr* c, uint32_t a) {
  c->off = (c->off + a - 1) / a * a;
}

static uint32_t cdr_u32(struct cdr* c) {
  uint32_t v = 0;
  cdr_align(c, 4);
  if (c->off + 4 > c->size) {
    c->ok = 0;
    return 0;
  }
  memcpy(&v, c->p + c->off, 4);
  c->off += 4;
  return v;
}

static uint8_t cdr_u8(struct cdr* c) {
  if (c->off + 1 > c->size) {
    c->ok = 0;
    return 0;
  }
  return c->p[c->off++];
}

/* A CDR string: uint32 length including the NUL, the bytes, the NUL. */
static const char* cdr_string(struct cdr* c) {
  const uint32_t n = cdr_u32(c);
  if (!c->ok || n == 0 || c->off + n > c->size || c->p[c->off + n - 1] != 0) {
    c->ok = 0;
    return "";
  }
  const char* s = (const char*)(c->p + c->off);
  c->off += n;
  return s;
}

/* Decodes one serialised Image_ by hand; 1 when every field is what the caller expects. */
static int check_cdr(const uint8_t* buf, uint32_t size, uint32_t width, uint32_t height,
                     const char* encoding, uint32_t step, const char* frame_id) {
  if (size < 4 || buf[0] != 0x00 || buf[1] != 0x01) { /* CDR_LE encapsulation */
    printf("cdr bad encapsulation %02x%02x\n", size > 1 ? buf[0] : 0, size > 1 ? buf[1] : 0);
    return 0;
  }
  struct cdr c = {buf + 4, size - 4, 0, 1};
  const int32_t sec = (int32_t)cdr_u32(&c); /* header.stamp.sec */
  const uint32_t nanosec = cdr_u32(&c);     /* header.stamp.nanosec */
  const char* fid = cdr_string(&c);         /* header.frame_id */
  const uint32_t h = cdr_u32(&c);
  const uint32_t w = cdr_u32(&c);
  const char* enc = cdr_string(&c);
  const uint8_t big = cdr_u8(&c);
  const uint32_t st = cdr_u32(&c);
  const uint32_t n = cdr_u32(&c); /* data: uint32 count, then the bytes */
  uint64_t seq = 0;
  const int data_ok =
      c.ok && c.off + n == c.size && n == st * h && data_matches(c.p + c.off, n, &seq);
  const int ok = c.ok && data_ok && h == height && w == width && strcmp(enc, encoding) == 0 &&
                 big == 0 && st == step && strcmp(fid, frame_id) == 0 &&
                 (sec != 0 || nanosec != 0) && nanosec < 1000000000u;
  printf(
      "cdr stamp=%d.%09u frame_id=%s height=%u width=%u encoding=%s is_bigendian=%u step=%u "
      "bytes=%u sequence=%llu ok=%d\n",
      sec, nanosec, fid, h, w, enc, big, st, n, (unsigned long long)seq, ok);
  return ok;
}

int main(int argc, char** argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: %s TOPIC COUNT TIMEOUT_S DOMAIN WIDTH HEIGHT ENCODING FRAME_ID\n",
            argv[0]);
    return 2;
  }
  const char* topic_name = argv[1];
  const unsigned long want = strtoul(argv[2], NULL, 10);
  const double timeout_s = strtod(argv[3], NULL);
  const dds_domainid_t domain = (dds_domainid_t)strtoul(argv[4], NULL, 10);
  const uint32_t width = (uint32_t)strtoul(argv[5], NULL, 10);
  const uint32_t height = (uint32_t)strtoul(argv[6], NULL, 10);
  const char* encoding = argv[7];
  const char* frame_id = argv[8];
  const uint32_t step = width * bytes_per_pixel(encoding);

  const dds_entity_t pp = dds_create_participant(domain, NULL, NULL);
  if (pp < 0) {
    fprintf(stderr, "dds_create_participant: %s\n", dds_strretcode(pp));
    return 1;
  }
  const dds_entity_t topic =
      dds_create_topic(pp, &sensor_msgs_msg_dds__Image__desc, topic_name, NULL, NULL);
  dds_qos_t* qos = dds_create_qos();
  dds_qset_reliability(qos, DDS_RELIABILITY_BEST_EFFORT, 0);
  dds_qset_history(qos, DDS_HISTORY_KEEP_LAST, 5);
  dds_qset_durability(qos, DDS_DURABILITY_VOLATILE);
  const dds_entity_t reader = dds_create_reader(pp, topic, qos, NULL);
  const dds_entity_t raw = dds_create_reader(pp, topic, qos, NULL);
  dds_delete_qos(qos);
  if (topic < 0 || reader < 0 || raw < 0) {
    fprintf(stderr, "topic/reader: %s\n", dds_strretcode(topic < 0 ? topic : reader));
    dds_delete(pp);
    return 1;
  }
  const dds_entity_t ws = dds_create_waitset(pp);
  dds_waitset_attach(ws, dds_create_readcondition(reader, DDS_ANY_STATE), 0);
  printf("subscribed %s (%s)\n", topic_name, sensor_msgs_msg_dds__Image__desc.m_typename);
  fflush(stdout);

  unsigned long good = 0, bad = 0, cdr_good = 0, cdr_bad = 0;
  const dds_time_t end = dds_time() + (dds_duration_t)(timeout_s * 1e9);
  while (good + bad < want && dds_time() < end) {
    dds_waitset_wait(ws, NULL, 0, DDS_MSECS(100));
    void* samples[8] = {NULL};
    dds_sample_info_t infos[8];
    const dds_return_t n = dds_take(reader, samples, infos, 8, 8);
    for (dds_return_t i = 0; i < n; ++i) {
      if (!infos[i].valid_data) continue;
      const sensor_msgs_msg_dds__Image_* m = samples[i];
      uint64_t seq = 0;
      const int fields_ok = m->width == width && m->height == height &&
                            strcmp(m->encoding, encoding) == 0 && m->step == step &&
                            m->is_bigendian == 0 && strcmp(m->header.frame_id, frame_id) == 0 &&
                            (m->header.stamp.sec != 0 || m->header.stamp.nanosec != 0) &&
                            m->header.stamp.nanosec < 1000000000u;
      const int length_ok = (uint64_t)m->data._length == (uint64_t)m->step * m->height;
      const int data_ok = length_ok && data_matches(m->data._buffer, m->data._length, &seq);
      printf(
          "image width=%u height=%u encoding=%s step=%u is_bigendian=%u frame_id=%s "
          "stamp=%d.%09u bytes=%u sequence=%llu fields_ok=%d data_ok=%d\n",
          m->width, m->height, m->encoding, m->step, m->is_bigendian, m->header.frame_id,
          m->header.stamp.sec, m->header.stamp.nanosec, m->data._length, (unsigned long long)seq,
          fields_ok, data_ok);
      if (fields_ok && data_ok) {
        ++good;
      } else {
        ++bad;
      }
    }
    if (n > 0) dds_return_loan(reader, samples, n);
    struct ddsi_serdata* ser[8];
    const dds_return_t m = dds_takecdr(raw, ser, 8, infos, DDS_ANY_STATE);
    for (dds_return_t i = 0; i < m; ++i) {
      if (infos[i].valid_data) {
        const uint32_t size = ddsi_serdata_size(ser[i]);
        uint8_t* buf = malloc(size);
        if (buf != NULL) {
          ddsi_serdata_to_ser(ser[i], 0, size, buf);
          if (check_cdr(buf, size, width, height, encoding, step, frame_id)) {
            ++cdr_good;
          } else {
            ++cdr_bad;
          }
          free(buf);
        }
      }
      ddsi_serdata_unref(ser[i]);
    }
  }
  printf("images good=%lu bad=%lu; hand-decoded CDR good=%lu bad=%lu\n", good, bad, cdr_good,
         cdr_bad);
  dds_delete(pp);
  return good >= want && bad == 0 && cdr_good > 0 && cdr_bad == 0 ? 0 : 1;
}
