// serve.cpp — ringdump serve (see serve.hpp), on Boost.Beast (HTTP and WebSocket) and Boost.Asio.
//
// Threads: the network runs on one io_context thread (the main thread); each channel has a
// reader thread. A reader thread encodes a frame once into a shared, immutable message and
// offers it to every client subscribed to the channel; a client's offer() appends to its queue
// under the client's mutex, dropping the oldest queued frame when the queue is full, and posts a
// write to the io thread when none is in flight. The io thread alone touches the sockets.
// Locks: the hub's mutex is taken before a client's, never the other way round.
#include <unistd.h>

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility> (C++20).
#include <utility>
// clang-format off
#include <boost/asio.hpp>
// clang-format on
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "ringdump/messages.hpp"
#include "ringdump/serve.hpp"
#include "ringdump/serve_status.hpp"

namespace ringdump::serve {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Json = nlohmann::ordered_json;
using namespace std::chrono;

constexpr const char* kSubprotocol = "foxglove.websocket.v1";
// What one client may ask for: control messages are small JSON, subscriptions a few per channel.
constexpr std::size_t kMaxSubscriptions = 1024;
constexpr std::size_t kMaxClientMessage = std::size_t{64} * 1024;

std::uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

struct Advert {
  std::uint32_t id = 0;
  std::string topic;
  bool image = false;
};

Json advert_json(const Advert& a) {
  Json j;
  j["id"] = a.id;
  j["topic"] = a.topic;
  j["encoding"] = "cdr";
  j["schemaName"] = std::string(a.image ? messages::kImageSchemaName : messages::kFrameSchemaName);
  j["schema"] = a.image ? messages::kImageSchema : messages::kFrameSchema;
  j["schemaEncoding"] = "ros2msg";
  return j;
}

using Payload = std::shared_ptr<const Buffer>;

struct Outgoing {
  std::uint32_t subscription = 0;
  std::uint32_t channel = 0;  // advertised id
  std::uint64_t log_time = 0;
  Payload payload;
};

class Hub;

// One WebSocket client.
class Client : public std::enable_shared_from_this<Client> {
 public:
  Client(tcp::socket socket, Hub& hub, std::uint64_t id, std::size_t queue)
      : ws_(std::move(socket)), hub_(hub), id_(id), queue_limit_(queue) {}

  void start(http::request<http::string_body> request);
  void send_text(std::string text) {
    std::lock_guard lock(m_);
    text_.push_back(std::move(text));
    kick();
  }
  // A frame of channel `channel` for this client, if it subscribed to it.
  void offer(std::uint32_t channel, std::uint64_t log_time, const Payload& payload) {
    std::lock_guard lock(m_);
    if (closed_) return;
    for (const auto& [subscription, ch] : subscriptions_) {
      if (ch != channel) continue;
      frames_.push_back(Outgoing{subscription, channel, log_time, payload});
      if (frames_.size() > queue_limit_) {
        ++per_channel_[frames_.front().channel].dropped;
        frames_.pop_front();  // the oldest: a slow client sees the newest frames
        dropped_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    kick();
  }
  bool subscribed(std::uint32_t channel) {
    std::lock_guard lock(m_);
    for (const auto& [subscription, ch] : subscriptions_) {
      if (ch == channel) return true;
    }
    return false;
  }
  Json stats() {
    std::lock_guard lock(m_);
    Json j;
    j["id"] = id_;
    j["subscriptions"] = subscriptions_.size();
    j["sent_frames"] = sent_.load(std::memory_order_relaxed);
    j["dropped_frames"] = dropped_.load(std::memory_order_relaxed);
    j["queued_frames"] = frames_.size();
    return j;
  }
  // For the status file: per advertised channel id, what was sent and dropped.
  serve_status::Client status(const std::vector<Advert>& adverts) {
    std::lock_guard lock(m_);
    serve_status::Client c;
    c.id = id_;
    c.queued_frames = frames_.size();
    for (const auto& [channel, counts] : per_channel_) {
      if (channel == 0 || channel > adverts.size()) continue;
      c.channels.push_back({adverts[channel - 1].topic, counts.sent, counts.dropped});
    }
    return c;
  }
  std::uint64_t id() const noexcept { return id_; }
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  std::uint64_t sent() const noexcept { return sent_.load(std::memory_order_relaxed); }

 private:
  void kick() {  // m_ held
    if (writing_ || closed_) return;
    if (text_.empty() && frames_.empty()) return;
    writing_ = true;
    net::post(ws_.get_executor(), [self = shared_from_this()] { self->write_next(); });
  }
  void write_next();
  void read_next();
  void on_text(const std::string& text);
  void close();

  websocket::stream<beast::tcp_stream> ws_;
  Hub& hub_;
  std::uint64_t id_;
  std::size_t queue_limit_;
  beast::flat_buffer in_;
  std::mutex m_;
  std::deque<std::string> text_;
  std::deque<Outgoing> frames_;
  std::map<std::uint32_t, std::uint32_t> subscriptions_;  // subscription id -> channel id
  struct Counts {
    std::uint64_t sent = 0, dropped = 0;
  };
  std::map<std::uint32_t, Counts> per_channel_;  // channel id -> frames sent and dropped
  bool writing_ = false;
  bool closed_ = false;
  // The write in flight (io thread only).
  std::string current_text_;
  Outgoing current_frame_;
  std::array<unsigned char, 13> head_{};
  std::atomic<std::uint64_t> sent_{0}, dropped_{0};
};

// The channels advertised and the clients connected.
class Hub {
 public:
  explicit Hub(std::uint64_t clock_offset) : clock_offset_(clock_offset) {}

  void join(const std::shared_ptr<Client>& c) {
    std::lock_guard lock(m_);
    clients_.insert(c);
    Json info;
    info["op"] = "serverInfo";
    info["name"] = "ringdump serve (ipcring)";
    info["capabilities"] = Json::array();
    info["supportedEncodings"] = Json::array();
    info["metadata"] = Json::object();
    info["sessionId"] = std::to_string(clock_offset_);
    c->send_text(info.dump());
    if (!adverts_.empty()) {
      Json a;
      a["op"] = "advertise";
      a["channels"] = Json::array();
      for (const auto& ad : adverts_) a["channels"].push_back(advert_json(ad));
      c->send_text(a.dump());
    }
  }
  void leave(const std::shared_ptr<Client>& c) {
    std::lock_guard lock(m_);
    if (clients_.erase(c) != 0) {
      left_dropped_ += c->dropped();
      for (const auto& cc : c->status(adverts_).channels) {
        auto& t = left_[cc.channel];
        t.first += cc.sent_frames;
        t.second += cc.dropped_frames;
      }
      std::fprintf(stderr, "ringdump serve: client %llu left: sent=%llu dropped=%llu\n",
                   static_cast<unsigned long long>(c->id()),
                   static_cast<unsigned long long>(c->sent()),
                   static_cast<unsigned long long>(c->dropped()));
    }
  }
  std::uint32_t advertise(const std::string& topic, bool image) {
    std::lock_guard lock(m_);
    Advert a{static_cast<std::uint32_t>(adverts_.size() + 1), topic, image};
    adverts_.push_back(a);
    Json j;
    j["op"] = "advertise";
    j["channels"] = Json::array({advert_json(a)});
    const std::string text = j.dump();
    for (const auto& c : clients_) c->send_text(text);
    return a.id;
  }
  bool known(std::uint32_t channel) {
    std::lock_guard lock(m_);
    return channel >= 1 && channel <= adverts_.size();
  }
  bool wanted(std::uint32_t channel) {
    std::lock_guard lock(m_);
    for (const auto& c : clients_) {
      if (c->subscribed(channel)) return true;
    }
    return false;
  }
  void publish(std::uint32_t channel, std::uint64_t log_time, const Payload& p) {
    std::lock_guard lock(m_);
    for (const auto& c : clients_) c->offer(channel, log_time, p);
  }
  // The clients connected now, and into `totals` (channel -> frames sent, dropped) the counts of
  // every client since the start.
  std::vector<serve_status::Client> status(
      std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>& totals) {
    std::lock_guard lock(m_);
    totals = left_;
    std::vector<serve_status::Client> v;
    for (const auto& c : clients_) {
      v.push_back(c->status(adverts_));
      for (const auto& cc : v.back().channels) {
        auto& t = totals[cc.channel];
        t.first += cc.sent_frames;
        t.second += cc.dropped_frames;
      }
    }
    return v;
  }
  Json stats(const Json& channels) {
    std::lock_guard lock(m_);
    Json j;
    j["clients"] = Json::array();
    std::uint64_t dropped = left_dropped_;
    for (const auto& c : clients_) {
      j["clients"].push_back(c->stats());
      dropped += c->dropped();
    }
    j["dropped_frames"] = dropped;
    j["channels"] = channels;
    return j;
  }

 private:
  std::mutex m_;
  std::uint64_t clock_offset_;
  std::vector<Advert> adverts_;
  std::set<std::shared_ptr<Client>> clients_;
  std::uint64_t left_dropped_ = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> left_;  // clients gone
};

void Client::start(http::request<http::string_body> request) {
  ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
  ws_.set_option(websocket::stream_base::decorator([](websocket::response_type& r) {
    r.set(http::field::sec_websocket_protocol, kSubprotocol);
    r.set(http::field::server, "ringdump serve");
  }));
  ws_.write_buffer_bytes(1 << 16);
  ws_.read_message_max(kMaxClientMessage);
  ws_.async_accept(request, [self = shared_from_this()](beast::error_code ec) {
    if (ec) return;
    self->hub_.join(self);
    self->read_next();
  });
}

void Client::read_next() {
  ws_.async_read(in_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
    if (ec) {
      self->close();
      return;
    }
    if (self->ws_.got_text()) self->on_text(beast::buffers_to_string(self->in_.data()));
    self->in_.consume(self->in_.size());
    self->read_next();
  });
}

void Client::on_text(const std::string& text) {
  auto status = [&](int level, const std::string& message) {
    Json j;
    j["op"] = "status";
    j["level"] = level;  // 0 info, 1 warning, 2 error
    j["message"] = message;
    send_text(j.dump());
  };
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("op") || !j["op"].is_string()) {
    status(2, "not a JSON object with an \"op\": " + text.substr(0, 200));
    return;
  }
  const std::string op = j["op"];
  if (op == "subscribe" && j.contains("subscriptions") && j["subscriptions"].is_array()) {
    for (const auto& s : j["subscriptions"]) {
      if (!s.is_object() || !s.contains("id") || !s["id"].is_number_unsigned() ||
          !s.contains("channelId") || !s["channelId"].is_number_unsigned()) {
        status(2, "subscribe: want {\"id\": N, \"channelId\": N}, got " + s.dump());
        continue;
      }
      const auto id = s["id"].get<std::uint32_t>();
      const auto channel = s["channelId"].get<std::uint32_t>();
      if (!hub_.known(channel)) {
        status(2, "subscribe: channel " + std::to_string(channel) + " is not advertised");
        continue;
      }
      bool full = false;
      {
        std::lock_guard lock(m_);
        full = subscriptions_.size() >= kMaxSubscriptions && subscriptions_.count(id) == 0;
        if (!full) subscriptions_[id] = channel;
      }
      if (full) {
        status(2, "subscribe: at most " + std::to_string(kMaxSubscriptions) +
                      " subscriptions per client");
      }
    }
  } else if (op == "unsubscribe" && j.contains("subscriptionIds") &&
             j["subscriptionIds"].is_array()) {
    std::lock_guard lock(m_);
    for (const auto& s : j["subscriptionIds"]) {
      if (!s.is_number_unsigned()) continue;
      const auto id = s.get<std::uint32_t>();
      subscriptions_.erase(id);
      // Frames already queued for it are not sent.
      std::erase_if(frames_, [&](const Outgoing& o) { return o.subscription == id; });
    }
  } else {
    status(1, "operation \"" + op + "\" is not supported by ringdump serve");
  }
}

void Client::write_next() {
  std::unique_lock lock(m_);
  if (closed_) {
    writing_ = false;
    return;
  }
  auto done = [self = shared_from_this()](bool frame) {
    return [self, frame](beast::error_code ec, std::size_t) {
      if (ec) {
        self->close();
        return;
      }
      if (frame) {
        self->sent_.fetch_add(1, std::memory_order_relaxed);
        {
          std::lock_guard counted(self->m_);
          ++self->per_channel_[self->current_frame_.channel].sent;
        }
        self->current_frame_.payload.reset();
      }
      self->write_next();
    };
  };
  if (!text_.empty()) {
    current_text_ = std::move(text_.front());
    text_.pop_front();
    lock.unlock();
    ws_.text(true);
    ws_.async_write(net::buffer(current_text_), done(false));
    return;
  }
  if (!frames_.empty()) {
    current_frame_ = std::move(frames_.front());
    frames_.pop_front();
    lock.unlock();
    head_[0] = 0x01;  // message data
    for (int i = 0; i < 4; ++i) {
      head_[1 + i] = static_cast<unsigned char>(current_frame_.subscription >> (8 * i));
    }
    for (int i = 0; i < 8; ++i) {
      head_[5 + i] = static_cast<unsigned char>(current_frame_.log_time >> (8 * i));
    }
    const std::array<net::const_buffer, 2> buffers{
        net::buffer(head_),
        net::buffer(current_frame_.payload->data(), current_frame_.payload->size())};
    ws_.binary(true);
    ws_.async_write(buffers, done(true));
    return;
  }
  writing_ = false;
}

void Client::close() {
  {
    std::lock_guard lock(m_);
    if (closed_) return;
    closed_ = true;
    frames_.clear();
  }
  hub_.leave(shared_from_this());
}

// ---- HTTP: the page, its script, /stats; an upgrade becomes a Client --------------------------

struct Server;

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, Server& server) : stream_(std::move(socket)), server_(server) {}
  void start() {
    stream_.expires_after(seconds(30));
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (!ec) self->on_request();
                     });
  }

 private:
  void on_request();
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  Server& server_;
};

// ---- the channels -------------------------------------------------------------------------

struct Channel {
  std::string name;
  std::string encoding;  // requested image encoding, or empty
  std::optional<ipcring::Reader> reader;
  std::thread thread;
  std::uint32_t image_id = 0, frame_id = 0;  // advertised ids (its thread only)
  std::atomic<std::uint64_t> frames{0}, published{0}, rate_limited{0}, unwanted{0};
  std::atomic<std::uint64_t> observer_dropped{0};  // copies the producer overwrote (its thread)
};

struct Server {
  net::io_context io{1};
  tcp::acceptor acceptor{io};
  Hub hub;
  std::vector<std::unique_ptr<Channel>> channels;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> next_client{1};
  std::size_t queue = 4;
  std::uint64_t clock_offset = 0;
  double max_rate_hz = 0;

  explicit Server(std::uint64_t offset) : hub(offset), clock_offset(offset) {}

  Json channel_stats() {
    Json a = Json::array();
    for (const auto& ch : channels) {
      Json j;
      j["name"] = ch->name;
      j["frames"] = ch->frames.load();
      j["published"] = ch->published.load();
      j["rate_limited"] = ch->rate_limited.load();
      j["unsubscribed"] = ch->unwanted.load();
      j["observer_dropped"] = ch->observer_dropped.load();
      a.push_back(j);
    }
    return a;
  }

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (!ec) std::make_shared<HttpSession>(std::move(socket), *this)->start();
      if (!stop.load()) accept();
    });
  }
};

void HttpSession::on_request() {
  if (websocket::is_upgrade(request_)) {
    stream_.expires_never();
    const auto id = server_.next_client.fetch_add(1);
    std::make_shared<Client>(stream_.release_socket(), server_.hub, id, server_.queue)
        ->start(std::move(request_));
    return;
  }
  const std::string target(request_.target());
  response_.version(request_.version());
  response_.keep_alive(false);
  response_.set(http::field::server, "ringdump serve");
  response_.set(http::field::cache_control, "no-store");
  if (request_.method() != http::verb::get) {
    response_.result(http::status::method_not_allowed);
    response_.body() = "GET only\n";
  } else if (target == "/" || target == "/index.html") {
    response_.set(http::field::content_type, "text/html; charset=utf-8");
    response_.body() = kPageHtml;
  } else if (target == "/app.js") {
    response_.set(http::field::content_type, "text/javascript; charset=utf-8");
    response_.body() = kPageScript;
  } else if (target == "/stats") {
    response_.set(http::field::content_type, "application/json");
    response_.body() = server_.hub.stats(server_.channel_stats()).dump() + "\n";
  } else {
    response_.result(http::status::not_found);
    response_.body() = "not found: " + target + " (try /, /app.js, /stats)\n";
  }
  response_.prepare_payload();
  http::async_write(stream_, response_,
                    [self = shared_from_this()](beast::error_code, std::size_t) {
                      beast::error_code ignored;
                      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                    });
}

// An observer per channel (latest policy: a live view wants the newest frame). Its frame is a
// copy in the observer's buffer, encoded into the message and released before anything waits on a
// client. A channel advertised and subscribed by nobody is not read (looked at every 10 ms).
void read_channel(Channel& ch, Server& s) {
  const auto period =
      s.max_rate_hz > 0 ? duration<double>(1.0 / s.max_rate_hz) : duration<double>(0.0);
  auto last = steady_clock::time_point{};
  while (!s.stop.load(std::memory_order_relaxed)) {
    if ((ch.image_id != 0 || ch.frame_id != 0) && !s.hub.wanted(ch.image_id) &&
        !s.hub.wanted(ch.frame_id)) {
      std::this_thread::sleep_for(milliseconds(10));
      continue;
    }
    auto f = ch.reader->read(milliseconds(100));
    if (!f) {
      const auto st = f.status();
      if (st == ipcring::Status::timeout || st == ipcring::Status::no_frame ||
          st == ipcring::Status::producer_gone) {
        continue;
      }
      std::fprintf(stderr, "ringdump serve: %s: read failed: %s\n", ch.name.c_str(),
                   ipcring::to_string(st));
      return;
    }
    ch.frames.fetch_add(1, std::memory_order_relaxed);
    ch.observer_dropped.store(ch.reader->observer_dropped(), std::memory_order_relaxed);
    const auto now = steady_clock::now();
    if (period.count() > 0 && now - last < period) {
      ch.rate_limited.fetch_add(1, std::memory_order_relaxed);
      continue;  // f released by its destructor
    }
    const std::uint64_t stamp = f->timestamp_ns() + s.clock_offset;
    const auto tensor = f->tensor();
    const bool image = tensor && messages::image_encoding(*tensor, ch.encoding).has_value();
    std::uint32_t& id = image ? ch.image_id : ch.frame_id;
    if (id == 0) id = s.hub.advertise(ch.name, image);
    if (!s.hub.wanted(id)) {
      ch.unwanted.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    auto payload = std::make_shared<Buffer>();
    payload->reserve(f->size() + 512 + f->metadata().size());
    messages::encode(*payload, *f, ch.name, ch.encoding, stamp);
    f->release();
    last = now;
    s.hub.publish(id, stamp, payload);
    ch.published.fetch_add(1, std::memory_order_relaxed);
  }
}

int cmd_serve(const Commands& c) {
  const std::uint64_t offset = clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC);
  Server s(offset);
  s.queue = c.queue;
  s.max_rate_hz = c.max_rate_hz;
  // No names: every channel listed now (channels created later are not picked up).
  const bool all = c.names.empty();
  const std::vector<std::string> names = all ? ipcring::list_channels() : c.names;
  for (const auto& name : names) {
    auto ch = std::make_unique<Channel>();
    ch->name = name;
    s.channels.push_back(std::move(ch));
  }
  for (const auto& e : c.encodings) {
    const auto eq = e.rfind('=');
    const std::string name = eq == std::string::npos ? "" : e.substr(0, eq);
    const std::string enc = eq == std::string::npos ? "" : e.substr(eq + 1);
    auto it = std::find_if(s.channels.begin(), s.channels.end(),
                           [&](const auto& ch) { return ch->name == name; });
    if (it == s.channels.end() || !messages::bytes_per_pixel(enc)) {
      std::fprintf(stderr,
                   "ringdump serve: --encoding %s: want NAME=ENCODING with NAME one of the "
                   "served channels and ENCODING one of mono8, rgb8, bgr8, rgba8, bgra8\n",
                   e.c_str());
      return ipcring::tools::kExitUsage;
    }
    (*it)->encoding = enc;
  }
  for (auto& ch : s.channels) {
    // An observer (docs/observers.md): no reader entry, nothing held in the producer's ring, so
    // serve never disturbs the channel and serves one whose reader entries are all taken.
    ipcring::ReaderOptions o;
    o.policy = ipcring::ReadPolicy::latest;
    o.observer = true;
    o.wait_for_channel = duration_cast<nanoseconds>(duration<double>(all ? 0.0 : c.wait_s));
    try {
      ch->reader.emplace(ipcring::Reader::attach(ch->name, o));
    } catch (const ipcring::Error& e) {
      // Errc::unsupported: a CUDA channel (observers copy with the CPU; frames are device memory).
      if (e.code() == ipcring::Errc::unsupported) {
        std::fprintf(stderr, "ringdump serve: %s; this ringdump serves host channels only\n",
                     e.what());
        if (!all) return ipcring::tools::kExitError;
        continue;
      }
      if (!all) throw;
      std::fprintf(stderr, "ringdump serve: %s: not served: %s\n", ch->name.c_str(), e.what());
      continue;
    }
  }

  std::erase_if(s.channels, [](const auto& ch) { return !ch->reader.has_value(); });
  if (s.channels.empty()) {
    std::fprintf(stderr, "ringdump serve: no channel to serve (ringdump list shows them)\n");
    return ipcring::tools::kExitError;
  }
  beast::error_code ec;
  const auto address = net::ip::make_address(c.host, ec);
  if (ec) {
    std::fprintf(stderr, "ringdump serve: --host %s: not an IP address (%s)\n", c.host.c_str(),
                 ec.message().c_str());
    return ipcring::tools::kExitUsage;
  }
  const tcp::endpoint endpoint(address, c.port);
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    std::fprintf(stderr, "ringdump serve: cannot listen on %s port %u: %s\n", c.host.c_str(),
                 static_cast<unsigned>(c.port), ec.message().c_str());
    return ipcring::tools::kExitError;
  }
  const auto bound = s.acceptor.local_endpoint();
  std::printf("ringdump serve: listening on http://%s:%u/ (WebSocket %s)\n",
              bound.address().to_string().c_str(), static_cast<unsigned>(bound.port()),
              kSubprotocol);
  std::fflush(stdout);
  if (!address.is_loopback()) {
    std::fprintf(stderr,
                 "ringdump serve: note: %s is not a loopback address: anyone who can reach it "
                 "sees these channels\n",
                 c.host.c_str());
  }
  s.accept();
  // The status file `ringdump show` reads (serve_status.hpp), written now and once a second on
  // the io thread; a failed write is said once and serving goes on.
  serve_status::Status status;
  status.pid = static_cast<std::uint32_t>(::getpid());
  status.start_time = serve_status::start_time_of(status.pid);
  status.address =
      "http://" + bound.address().to_string() + ":" + std::to_string(bound.port()) + "/";
  const std::string directory = ipcring::channel_directory();
  bool status_failed = false;
  net::steady_timer status_timer(s.io);
  std::function<void()> write_status = [&] {
    status.updated_unix_ns = clock_ns(CLOCK_REALTIME);
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> totals;
    status.clients = s.hub.status(totals);
    status.channels.clear();
    for (const auto& ch : s.channels) {
      const auto& t = totals[ch->name];
      status.channels.push_back(
          {ch->name, ch->frames.load(), ch->observer_dropped.load(), t.first, t.second});
    }
    try {
      serve_status::write(status, directory);
    } catch (const std::exception& e) {
      if (!status_failed) {
        std::fprintf(stderr, "ringdump serve: no status for ringdump show: %s\n", e.what());
      }
      status_failed = true;
    }
    status_timer.expires_after(seconds(1));
    status_timer.async_wait([&](beast::error_code waited) {
      if (!waited && !s.stop.load()) write_status();
    });
  };
  write_status();
  net::signal_set signals(s.io, SIGINT, SIGTERM);
  signals.async_wait([&](beast::error_code, int) {
    s.stop.store(true);
    s.io.stop();
  });
  for (auto& ch : s.channels) ch->thread = std::thread(read_channel, std::ref(*ch), std::ref(s));
  s.io.run();
  s.stop.store(true);
  for (auto& ch : s.channels) ch->thread.join();
  ::unlink(serve_status::path_for(status.pid, directory).c_str());
  const Json stats = s.hub.stats(s.channel_stats());
  std::printf("ringdump serve: %s\n", stats.dump().c_str());
  std::fflush(stdout);
  return ipcring::tools::kExitOk;
}

}  // namespace

void add(CLI::App& app, Commands& c) {
  c.serve = app.add_subcommand(
      "serve", "Serve channels live: Foxglove WebSocket protocol, and a page of its own at /");
  c.serve->add_option("name", c.names, "Channel names (default: every channel listed now)");
  c.serve->add_option("--host", c.host, "Address to listen on (default: loopback only)")
      ->capture_default_str();
  c.serve->add_option("--port", c.port, "TCP port (0: any free one, printed)")
      ->capture_default_str();
  c.serve
      ->add_option("--max-rate", c.max_rate_hz, "Frames per second per channel, at most (0: all)")
      ->check(ipcring::tools::non_negative())
      ->capture_default_str();
  c.serve
      ->add_option("--queue", c.queue,
                   "Frames queued per client; beyond it the oldest is dropped and counted")
      ->check(CLI::Range(1U, 1024U))
      ->capture_default_str();
  c.serve->add_option("--encoding", c.encodings,
                      "NAME=ENCODING: the image encoding of a channel's uint8 (H, W, C) frames");
  c.serve
      ->add_option("--wait-for-channel,--wait", c.wait_s,
                   "Seconds to wait for each channel to appear")
      ->check(ipcring::tools::non_negative(1e6))
      ->capture_default_str();
}

std::optional<int> run(const Commands& c) {
  if (c.serve == nullptr || !c.serve->parsed()) return std::nullopt;
  return cmd_serve(c);
}

}  // namespace ringdump::serve
