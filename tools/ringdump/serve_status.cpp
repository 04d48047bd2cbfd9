// serve_status.cpp — serve's status files (see serve_status.hpp).
#include "ringdump/serve_status.hpp"
#include "common/errno_text.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ringdump::serve_status {

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kPrefix = "ringdump-serve.";
constexpr const char* kSuffix = ".json";

// The pid of a status file's name "ringdump-serve.<pid>.json", or 0 when it is not one.
std::uint32_t pid_of_name(const std::string& name) {
  const std::size_t prefix = std::strlen(kPrefix);
  const std::size_t suffix = std::strlen(kSuffix);
  if (name.size() <= prefix + suffix || name.compare(0, prefix, kPrefix) != 0 ||
      name.compare(name.size() - suffix, suffix, kSuffix) != 0) {
    return 0;
  }
  const std::string digits = name.substr(prefix, name.size() - prefix - suffix);
  if (digits.empty() || digits.size() > 10 || digits[0] == '0') return 0;
  std::uint64_t v = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return 0;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v <= 0x7fffffffULL ? static_cast<std::uint32_t>(v) : 0;
}

// A JSON unsigned integer field of `j`, or a problem.
bool get_u64(const Json& j, const char* key, std::uint64_t& out, std::string& problem,
             const std::string& where) {
  if (!j.contains(key) || !j[key].is_number_unsigned()) {
    problem = where + "\"" + key + "\" is not an unsigned integer";
    return false;
  }
  out = j[key].get<std::uint64_t>();
  return true;
}

bool get_string(const Json& j, const char* key, std::string& out, std::string& problem,
                const std::string& where, std::size_t max) {
  if (!j.contains(key) || !j[key].is_string()) {
    problem = where + "\"" + key + "\" is not a string";
    return false;
  }
  out = j[key].get<std::string>();
  if (out.size() > max) {
    problem = where + "\"" + key + "\" is " + std::to_string(out.size()) +
              " characters long, more than " + std::to_string(max);
    return false;
  }
  return true;
}

// Reads at most kMaxStatusBytes of a regular file, not following a link. Empty optional and
// `problem` set when it cannot.
std::optional<std::string> read_bounded(const std::string& path, std::string& problem,
                                        int& open_errno) {
  open_errno = 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    open_errno = errno;
    problem = "cannot open: " + ipcring::detail::errno_detail(open_errno);
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    problem = "not a regular file";
    return std::nullopt;
  }
  if (static_cast<std::uint64_t>(st.st_size) > kMaxStatusBytes) {
    ::close(fd);
    problem = std::to_string(st.st_size) + " bytes, more than a status file's " +
              std::to_string(kMaxStatusBytes);
    return std::nullopt;
  }
  std::string text(kMaxStatusBytes + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      problem = "cannot read: " + ipcring::detail::errno_detail(errno);
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (got > kMaxStatusBytes) {
    problem = "grew beyond " + std::to_string(kMaxStatusBytes) + " bytes while read";
    return std::nullopt;
  }
  text.resize(got);
  return text;
}

bool pid_alive(std::uint32_t pid) {
  return pid != 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

std::uint64_t start_time_of(std::uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses; fields follow the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {  // field 3 (state) .. field 22 (starttime)
    if (!(fields >> field)) return 0;
  }
  try {
    return std::stoull(field);
  } catch (const std::exception&) {
    return 0;
  }
}

std::string path_for(std::uint32_t pid, const std::string& directory) {
  return directory + "/" + kPrefix + std::to_string(pid) + kSuffix;
}

void write(const Status& s, const std::string& directory) {
  Json j;
  j["format"] = kFormat;
  j["pid"] = s.pid;
  j["start_time"] = s.start_time;
  j["updated_unix_ns"] = s.updated_unix_ns;
  j["address"] = s.address;
  j["channels"] = Json::array();
  for (const auto& c : s.channels) {
    j["channels"].push_back({{"name", c.name},
                             {"frames", c.frames},
                             {"observer_dropped", c.observer_dropped},
                             {"sent_frames", c.sent_frames},
                             {"dropped_frames", c.dropped_frames}});
  }
  j["clients"] = Json::array();
  for (const auto& c : s.clients) {
    Json cj;
    cj["id"] = c.id;
    cj["queued_frames"] = c.queued_frames;
    cj["channels"] = Json::array();
    for (const auto& cc : c.channels) {
      cj["channels"].push_back({{"channel", cc.channel},
                                {"sent_frames", cc.sent_frames},
                                {"dropped_frames", cc.dropped_frames}});
    }
    j["clients"].push_back(cj);
  }
  const std::string text = j.dump() + "\n";
  const std::string path = path_for(s.pid, directory);
  const std::string tmp = directory + "/." + kPrefix + std::to_string(s.pid) + kSuffix + ".tmp";
  ::unlink(tmp.c_str());  // a previous write of this pid that did not get to its rename
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    throw std::runtime_error("cannot create " + tmp + ": " + ipcring::detail::errno_detail(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write " + tmp + ": " + ipcring::detail::errno_detail(e));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " +
                             ipcring::detail::errno_detail(e));
  }
}

std::optional<Status> parse(const std::string& text, std::string& problem) {
  const Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    problem = "not a JSON object";
    return std::nullopt;
  }
  Status s;
  std::string format;
  if (!get_string(j, "format", format, problem, "", 64)) return std::nullopt;
  if (format != kFormat) {
    problem = "format \"" + format + "\", want \"" + kFormat + "\"";
    return std::nullopt;
  }
  std::uint64_t pid = 0;
  if (!get_u64(j, "pid", pid, problem, "") ||
      !get_u64(j, "start_time", s.start_time, problem, "") ||
      !get_u64(j, "updated_unix_ns", s.updated_unix_ns, problem, "") ||
      !get_string(j, "address", s.address, problem, "", 256)) {
    return std::nullopt;
  }
  if (pid == 0 || pid > 0x7fffffffULL) {
    problem = "pid " + std::to_string(pid) + " is not a process id";
    return std::nullopt;
  }
  s.pid = static_cast<std::uint32_t>(pid);
  if (!j.contains("channels") || !j["channels"].is_array() || j["channels"].size() > kMaxChannels) {
    problem = "\"channels\" is not an array of at most " + std::to_string(kMaxChannels);
    return std::nullopt;
  }
  for (std::size_t i = 0; i < j["channels"].size(); ++i) {
    const Json& c = j["channels"][i];
    const std::string where = "channels[" + std::to_string(i) + "]: ";
    ServedChannel sc;
    if (!c.is_object()) {
      problem = where + "not an object";
      return std::nullopt;
    }
    if (!get_string(c, "name", sc.name, problem, where, 200) ||
        !get_u64(c, "frames", sc.frames, problem, where) ||
        !get_u64(c, "observer_dropped", sc.observer_dropped, problem, where) ||
        !get_u64(c, "sent_frames", sc.sent_frames, problem, where) ||
        !get_u64(c, "dropped_frames", sc.dropped_frames, problem, where)) {
      return std::nullopt;
    }
    s.channels.push_back(std::move(sc));
  }
  if (!j.contains("clients") || !j["clients"].is_array() || j["clients"].size() > kMaxClients) {
    problem = "\"clients\" is not an array of at most " + std::to_string(kMaxClients);
    return std::nullopt;
  }
  for (std::size_t i = 0; i < j["clients"].size(); ++i) {
    const Json& c = j["clients"][i];
    const std::string where = "clients[" + std::to_string(i) + "]: ";
    Client cl;
    if (!c.is_object() || !c.contains("channels") || !c["channels"].is_array() ||
        c["channels"].size() > kMaxChannels) {
      problem = where + "not an object with an array \"channels\"";
      return std::nullopt;
    }
    if (!get_u64(c, "id", cl.id, problem, where) ||
        !get_u64(c, "queued_frames", cl.queued_frames, problem, where)) {
      return std::nullopt;
    }
    for (std::size_t k = 0; k < c["channels"].size(); ++k) {
      const Json& cc = c["channels"][k];
      const std::string at = where + "channels[" + std::to_string(k) + "]: ";
      ClientChannel ch;
      if (!cc.is_object()) {
        problem = at + "not an object";
        return std::nullopt;
      }
      if (!get_string(cc, "channel", ch.channel, problem, at, 200) ||
          !get_u64(cc, "sent_frames", ch.sent_frames, problem, at) ||
          !get_u64(cc, "dropped_frames", ch.dropped_frames, problem, at)) {
        return std::nullopt;
      }
      cl.channels.push_back(std::move(ch));
    }
    s.clients.push_back(std::move(cl));
  }
  return s;
}

std::vector<Found> scan(const std::string& directory) {
  std::vector<Found> found;
  DIR* d = ::opendir(directory.c_str());
  if (d == nullptr) return found;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe): our own stream
    const std::string name = e->d_name;
    if (pid_of_name(name) != 0) names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    Found f;
    f.path = directory + "/" + name;
    f.pid = pid_of_name(name);
    int open_errno = 0;
    const auto text = read_bounded(f.path, f.problem, open_errno);
    f.pid_alive = pid_alive(f.pid);
    if (!text) {
      if (open_errno == ENOENT) continue;  // removed meanwhile (its serve ended)
      f.state = Found::State::malformed;
      f.problem = f.path + ": " + f.problem;
    } else if (auto s = parse(*text, f.problem)) {
      if (s->pid != f.pid) {
        f.state = Found::State::malformed;
        f.problem = f.path + ": says pid " + std::to_string(s->pid) + ", its name pid " +
                    std::to_string(f.pid);
      } else if (!f.pid_alive) {
        f.state = Found::State::stale;
        f.problem = "pid " + std::to_string(f.pid) + " is gone";
      } else if (const std::uint64_t started = start_time_of(f.pid);
                 started != 0 && s->start_time != 0 && started != s->start_time) {
        // (0: /proc/PID/stat not readable here, e.g. hidepid: the pid alone decides.)
        f.state = Found::State::stale;
        f.problem = "pid " + std::to_string(f.pid) + " is another process now (start time " +
                    std::to_string(started) + ", the file says " + std::to_string(s->start_time) +
                    ")";
      } else {
        f.state = Found::State::live;
      }
      f.status = std::move(s);
    } else {
      f.state = Found::State::malformed;
      f.problem = f.path + ": " + f.problem;
    }
    found.push_back(std::move(f));
  }
  return found;
}

namespace {

double age_s(std::uint64_t updated_unix_ns) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const auto now = static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
                   static_cast<std::uint64_t>(ts.tv_nsec);
  return now >= updated_unix_ns ? static_cast<double>(now - updated_unix_ns) / 1e9 : 0.0;
}

const ServedChannel* served(const Status& s, const std::string& name) {
  for (const auto& c : s.channels) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

}  // namespace

nlohmann::ordered_json show_json(const std::vector<Found>& found, const std::string& name) {
  Json j;
  j["served_by"] = Json::array();
  j["serve_status_problems"] = Json::array();
  for (const auto& f : found) {
    if (f.state == Found::State::malformed) {
      j["serve_status_problems"].push_back(f.problem);
      continue;
    }
    const ServedChannel* ch = served(*f.status, name);
    if (ch == nullptr) continue;
    if (f.state == Found::State::stale) {
      j["serve_status_problems"].push_back(f.path + ": stale, " + f.problem +
                                           " (ringdump gc removes it)");
      continue;
    }
    Json e;
    e["pid"] = f.pid;
    e["address"] = f.status->address;
    e["updated_age_s"] = age_s(f.status->updated_unix_ns);
    e["frames"] = ch->frames;
    e["observer_dropped"] = ch->observer_dropped;
    e["sent_frames"] = ch->sent_frames;  // every client, those gone included
    e["dropped_frames"] = ch->dropped_frames;
    e["clients"] = Json::array();
    for (const auto& c : f.status->clients) {
      for (const auto& cc : c.channels) {
        if (cc.channel != name) continue;
        e["clients"].push_back({{"id", c.id},
                                {"sent_frames", cc.sent_frames},
                                {"dropped_frames", cc.dropped_frames},
                                {"queued_frames", c.queued_frames}});
      }
    }
    j["served_by"].push_back(e);
  }
  return j;
}

std::string show_text(const std::vector<Found>& found, const std::string& name) {
  const Json j = show_json(found, name);
  std::string out;
  char line[512];
  for (const auto& e : j["served_by"]) {
    std::snprintf(line, sizeof line,
                  "served by ringdump serve pid %u at %s (updated %.1f s ago): %zu client(s) "
                  "now; frames sent %llu, dropped for slow clients %llu, observer copies "
                  "dropped %llu\n",
                  e["pid"].get<unsigned>(), e["address"].get<std::string>().c_str(),
                  e["updated_age_s"].get<double>(), e["clients"].size(),
                  static_cast<unsigned long long>(e["sent_frames"].get<std::uint64_t>()),
                  static_cast<unsigned long long>(e["dropped_frames"].get<std::uint64_t>()),
                  static_cast<unsigned long long>(e["observer_dropped"].get<std::uint64_t>()));
    out += line;
    for (const auto& c : e["clients"]) {
      std::snprintf(line, sizeof line, "  client %llu: sent %llu, dropped %llu, queued %llu\n",
                    static_cast<unsigned long long>(c["id"].get<std::uint64_t>()),
                    static_cast<unsigned long long>(c["sent_frames"].get<std::uint64_t>()),
                    static_cast<unsigned long long>(c["dropped_frames"].get<std::uint64_t>()),
                    static_cast<unsigned long long>(c["queued_frames"].get<std::uint64_t>()));
      out += line;
    }
  }
  for (const auto& p : j["serve_status_problems"]) {
    out += "serve status: " + p.get<std::string>() + "\n";
  }
  return out;
}

}  // namespace ringdump::serve_status
