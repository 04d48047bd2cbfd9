// doctor.cpp — ringdump doctor [NAME]: what will happen on this machine, and why.
//
// One screen (or one JSON document) of checks, each "ok", "note", "warning", "problem" or
// "unknown" with what was found and, for a warning or a problem, the fix:
//   channel directory   the library's own checks (ipcring::inspect_name): trusted, missing, refused
//   /dev/shm            size and free space (the default channel directory's filesystem)
//   RemoveIPC           systemd-logind's setting for this user (logind.conf and its drop-ins)
//   namespaces          with a live channel: the producer's PID, network, IPC, user and mount
//                       namespaces against ours (SO_PEERCRED on the channel's socket, /proc/PID/ns)
//   NVIDIA driver       libcuda.so.1 loadable, /dev/nvidia* present
//   CUDA                the backend's capability probe (ipcring::probe_cuda), per device: both
//                       paths' refusals, and the path Backend::cuda would take there and why
//   GPU path            which path a channel uses (live: its cuda_path) or a Backend::cuda one
//                       would use, and why every other was not
//   memlock             RLIMIT_MEMLOCK
// Exit status: 0 when the setup can work (warnings allowed), 3 when a problem stops it.
//
// Like the other looking commands it takes no lease and changes nothing: the socket connection it
// makes for the producer's credentials is the one ipcring::inspect makes, and the descriptors the
// producer sends on it are closed unread.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/errno_text.hpp"
#include "ringdump/ringdump.hpp"

namespace ringdump {

namespace {

enum class Level { ok, note, warning, problem, unknown };

const char* level_name(Level l) {
  switch (l) {
    case Level::ok:
      return "ok";
    case Level::note:
      return "note";
    case Level::warning:
      return "warning";
    case Level::problem:
      return "problem";
    case Level::unknown:
      return "unknown";
  }
  return "unknown";
}

const char* level_colour(Level l) {
  switch (l) {
    case Level::ok:
      return kGreen;
    case Level::warning:
    case Level::unknown:
      return kYellow;
    case Level::problem:
      return kRed;
    case Level::note:
      return nullptr;
  }
  return nullptr;
}

struct Finding {
  std::string check;  // snake_case id (JSON)
  std::string title;  // text view
  Level level = Level::ok;
  std::string summary;
  std::string fix;  // empty for ok, note and unknown
  Json values = Json::object();
};

bool under(const std::string& path, const std::string& prefix) {
  return path == prefix ||
         (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
          path[prefix.size()] == '/');
}

std::string octal(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

// ---- the channel directory ----------------------------------------------------------------------

Finding check_directory(const std::string& name, const std::string& dir,
                        std::optional<ipcring::NameInfo>& info) {
  Finding f{"channel_directory", "channel directory", Level::ok, "", "", Json::object()};
  f.values["path"] = dir;
  // inspect_name opens the directory (and the name's subdirectories) with the library's checks:
  // ancestors, owner, mode, symbolic links. A name that does not exist only reads as missing.
  const std::string probe = name.empty() ? std::string("doctor") : name;
  try {
    ipcring::NameInfo got = ipcring::inspect_name(probe);
    struct stat st {};
    if (lstat(dir.c_str(), &st) == 0) {
      f.values["owner_uid"] = st.st_uid;
      f.values["mode"] = octal(st.st_mode);
      f.summary = dir + " (owner uid " + std::to_string(st.st_uid) + ", mode " + octal(st.st_mode) +
                  "): trusted";
    } else {
      f.summary = dir + ": trusted";
    }
    f.values["exists"] = true;
    if (!name.empty()) {
      f.values["name_state"] = ipcring::to_string(got.state);
      f.summary += "; " + name + " is " + ipcring::to_string(got.state);
      if (!got.holder.empty()) f.summary += " (" + got.holder + ")";
      if (got.state == ipcring::NameState::broken) {
        f.level = Level::problem;
        f.summary += ": " + got.problem;
        f.fix = "ringdump rm " + name + " --force, then restart its producer";
      }
      info = std::move(got);
    }
  } catch (const ipcring::Error& e) {
    f.values["exists"] = e.code() != Errc::not_found;
    if (e.code() == Errc::not_found) {
      f.level = Level::note;
      f.summary = name.empty()
                      ? dir + " does not exist yet; the first producer makes it (mode 0700)"
                      : std::string(e.what()) + "; its producer makes it (mode 0700)";
      if (!name.empty()) f.values["name_state"] = "missing";
    } else if (e.code() == Errc::invalid_name || e.code() == Errc::invalid_argument) {
      throw;
    } else {
      f.level = Level::problem;
      f.summary = e.what();
      // Without a NAME the check ran for a placeholder name: the message is the directory's.
      const std::string placeholder = "channel '" + probe + "': ";
      if (const auto at = f.summary.find(placeholder); name.empty() && at != std::string::npos) {
        f.summary.erase(at, placeholder.size());
      }
      f.fix =
          "as the message says; or set IPCRING_DIR to a directory that only you (or your "
          "group, for a shared one) can write";
    }
  }
  return f;
}

// ---- /dev/shm -----------------------------------------------------------------------------------

constexpr std::uint64_t kMinFreeNameBytes =
    std::uint64_t{64} * 1024;  // a lock file and a socket per name
constexpr std::uint64_t kDockerDefaultShm = 64ULL * 1024 * 1024;

Finding check_shm(const std::string& dir) {
  Finding f{"dev_shm", "/dev/shm", Level::ok, "", "", Json::object()};
  const bool holds_names = under(dir, "/dev/shm");
  f.values["holds_channel_directory"] = holds_names;
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0) {
    const int err = errno;
    f.level = holds_names ? Level::problem : Level::note;
    f.summary = "/dev/shm: " + ipcring::detail::errno_detail(err);
    if (holds_names) {
      f.fix =
          "mount a tmpfs on /dev/shm (mount -t tmpfs -o mode=1777 tmpfs /dev/shm), or set "
          "IPCRING_DIR to another directory";
    }
    return f;
  }
  const std::uint64_t size = static_cast<std::uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  const std::uint64_t free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  f.values["size_bytes"] = size;
  f.values["free_bytes"] = free;
  f.values["free_inodes"] = static_cast<std::uint64_t>(vfs.f_favail);
  f.summary = format_bytes(size) + ", " + format_bytes(free) + " free";
  if (holds_names && (free < kMinFreeNameBytes || vfs.f_favail < 16)) {
    f.level = Level::problem;
    f.summary += vfs.f_favail < 16 ? " and " + std::to_string(vfs.f_favail) + " inodes" : "";
    f.summary += ": too little for the channel directory's names (a lock file and a socket each)";
    f.fix =
        "free space in /dev/shm (ringdump gc removes stale channels), give the container a "
        "larger one (docker run --shm-size=256m), or set IPCRING_DIR to another directory";
    return f;
  }
  if (size < kDockerDefaultShm + 1 && size != 0) {
    f.level = Level::note;
    f.summary +=
        " (a container's default size); ipcring's frames live in sealed memfds, which "
        "this size does not limit, and are reserved in full when a channel is created";
  }
  return f;
}

// ---- RemoveIPC ----------------------------------------------------------------------------------

struct LogindSetting {
  std::optional<bool> remove_ipc;
  std::string source;  // the file that set it last
  std::vector<std::string> files;
};

std::optional<bool> parse_bool(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "yes" || v == "true" || v == "1" || v == "on" || v == "y" || v == "t") return true;
  if (v == "no" || v == "false" || v == "0" || v == "off" || v == "n" || v == "f") return false;
  return std::nullopt;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

void read_logind_file(const std::string& path, LogindSetting& out) {
  std::ifstream in(path);
  if (!in) return;
  out.files.push_back(path);
  std::string line;
  std::string section;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      section = line;
      continue;
    }
    if (section != "[Login]") continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    if (trim(line.substr(0, eq)) != "RemoveIPC") continue;
    if (const auto v = parse_bool(trim(line.substr(eq + 1)))) {
      out.remove_ipc = v;
      out.source = path;
    }
  }
}

// logind.conf, then its drop-ins in the order systemd reads them: every *.conf of the drop-in
// directories sorted by file name, a name in /etc hiding the same name in /run and /usr/lib.
LogindSetting read_logind() {
  LogindSetting s;
  std::ifstream main_file("/etc/systemd/logind.conf");
  read_logind_file(main_file ? "/etc/systemd/logind.conf" : "/usr/lib/systemd/logind.conf", s);
  std::map<std::string, std::string> dropins;  // file name -> path of the one that wins
  for (const char* d : {"/etc/systemd/logind.conf.d", "/run/systemd/logind.conf.d",
                        "/usr/local/lib/systemd/logind.conf.d", "/usr/lib/systemd/logind.conf.d"}) {
    DIR* dp = opendir(d);
    if (dp == nullptr) continue;
    while (const dirent* e = readdir(dp)) {  // NOLINT(concurrency-mt-unsafe): one thread
      const std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".conf") == 0) {
        dropins.emplace(n, std::string(d) + "/" + n);
      }
    }
    closedir(dp);
  }
  for (const auto& [file, path] : dropins) read_logind_file(path, s);
  return s;
}

Finding check_remove_ipc(const std::string& dir) {
  Finding f{"remove_ipc", "RemoveIPC", Level::ok, "", "", Json::object()};
  const LogindSetting s = read_logind();
  const uid_t uid = geteuid();
  const bool logind = !s.files.empty() || access("/lib/systemd/systemd-logind", F_OK) == 0 ||
                      access("/usr/lib/systemd/systemd-logind", F_OK) == 0;
  const bool effective = s.remove_ipc.value_or(true);  // systemd's default is yes
  f.values["uid"] = uid;
  f.values["logind_installed"] = logind;
  f.values["remove_ipc"] = effective;
  f.values["set_in"] = s.source.empty() ? Json(nullptr) : Json(s.source);
  f.values["files_read"] = s.files;
  const std::string where =
      s.source.empty() ? std::string("systemd's default") : "set in " + s.source;
  if (!logind) {
    f.summary = "systemd-logind is not installed: nothing removes IPC objects at logout";
    return f;
  }
  f.summary = std::string("RemoveIPC=") + (effective ? "yes" : "no") + " (" + where + ")";
  if (!effective) return f;
  if (uid < 1000) {
    f.summary += "; it does not apply to uid " + std::to_string(uid) + " (a system user)";
    return f;
  }
  if (!under(dir, "/dev/shm")) {
    f.summary += "; the channel directory " + dir + " is outside /dev/shm, which it does not touch";
    return f;
  }
  f.level = Level::warning;
  f.summary += ": when uid " + std::to_string(uid) +
               "'s last login session ends, logind removes its files in /dev/shm, the channel "
               "directory " +
               dir +
               " among them; live producers make their names again within their reap period, "
               "readers attaching meanwhile find no channel";
  f.fix =
      "RemoveIPC=no under [Login] in /etc/systemd/logind.conf.d/ipcring.conf (then systemctl "
      "restart systemd-logind), or loginctl enable-linger " +
      user_name(uid) + ", or run the producer as a system user";
  return f;
}

// ---- namespaces ---------------------------------------------------------------------------------

struct Peer {
  bool connected = false;
  std::string problem;
  pid_t pid = 0;  // in our PID namespace; 0: not visible from it
  uid_t uid = 0;
  gid_t gid = 0;
};

Peer producer_credentials(const std::string& socket_path) {
  Peer p;
  const auto slash = socket_path.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : socket_path.substr(0, slash);
  const std::string leaf = slash == std::string::npos ? socket_path : socket_path.substr(slash + 1);
  const int dir_fd = open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    p.problem = parent + ": " + ipcring::detail::errno_detail(errno);
    return p;
  }
  const std::string address = "/proc/self/fd/" + std::to_string(dir_fd) + "/" + leaf;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (address.size() >= sizeof sa.sun_path) {
    close(dir_fd);
    p.problem = "the socket's name is too long for an address";
    return p;
  }
  std::memcpy(sa.sun_path, address.c_str(), address.size());
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    p.problem = std::string("socket: ") + ipcring::detail::errno_detail(errno);
    close(dir_fd);
    return p;
  }
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    p.problem = "connect to " + socket_path + ": " + ipcring::detail::errno_detail(errno);
  } else {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      p.connected = true;
      p.pid = cred.pid;
      p.uid = cred.uid;
      p.gid = cred.gid;
    } else {
      p.problem = std::string("SO_PEERCRED: ") + ipcring::detail::errno_detail(errno);
    }
  }
  close(fd);  // the producer's message, and its descriptors, go unread
  close(dir_fd);
  return p;
}

// "same", "different" or "unknown" (with why) for one namespace kind.
std::pair<std::string, std::string> compare_namespace(const std::string& kind, pid_t pid) {
  struct stat self {};
  if (stat(("/proc/self/ns/" + kind).c_str(), &self) != 0) {
    return {"unknown", "/proc/self/ns/" + kind + ": " + ipcring::detail::errno_detail(errno)};
  }
  struct stat other {};
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/" + kind;
  if (stat(path.c_str(), &other) != 0)
    return {"unknown", path + ": " + ipcring::detail::errno_detail(errno)};
  const bool same = self.st_dev == other.st_dev && self.st_ino == other.st_ino;
  return {same ? "same" : "different", ""};
}

// True when /proc is this PID namespace's (a /proc of another namespace names other processes).
bool proc_is_ours() {
  char buf[32] = {};
  const ssize_t n = readlink("/proc/self", buf, sizeof buf - 1);
  return n > 0 && std::string(buf, static_cast<std::size_t>(n)) == std::to_string(getpid());
}

// `path`: the channel's CUDA path (none for a host channel, or when it could not be inspected).
Finding check_namespaces(const ipcring::NameInfo& info, ipcring::CudaPath path,
                         const std::string& name) {
  Finding f{"namespaces", "namespaces", Level::ok, "", "", Json::object()};
  const Peer peer = producer_credentials(info.socket_path);
  if (!peer.connected) {
    f.level = Level::unknown;
    f.summary = "cannot reach the producer: " + peer.problem;
    return f;
  }
  f.values["producer_pid_here"] = peer.pid;
  f.values["producer_uid_here"] = peer.uid;
  // Legacy CUDA IPC needs the producer's PID namespace (and, NVIDIA's advice, its IPC namespace);
  // CUDA VMM's descriptors travel over the socket like a host channel's memfds.
  const bool legacy = path == ipcring::CudaPath::legacy_ipc;
  const bool cuda = path != ipcring::CudaPath::none;
  std::map<std::string, std::string> state;
  std::vector<std::string> parts;
  const bool proc_ok = proc_is_ours();
  for (const char* kind : {"pid", "net", "ipc", "user", "mnt"}) {
    std::pair<std::string, std::string> r;
    if (peer.pid == 0) {
      r = std::string(kind) == "pid"
              ? std::pair<std::string, std::string>{"different",
                                                    "the producer's pid is not visible in this "
                                                    "PID namespace"}
              : std::pair<std::string, std::string>{"unknown",
                                                    "the producer's pid is not visible here"};
    } else if (!proc_ok) {
      r = {"unknown", "/proc is not this PID namespace's"};
    } else {
      r = compare_namespace(kind, peer.pid);
    }
    state[kind] = r.first;
    f.values[kind] = r.first;
    parts.push_back(std::string(kind) + " " + r.first +
                    (r.second.empty() ? std::string() : " (" + r.second + ")"));
  }
  f.summary = "producer of " + name +
              (peer.pid != 0 ? " (pid " + std::to_string(peer.pid) + " here)" : "") + ": ";
  for (std::size_t i = 0; i < parts.size(); ++i) f.summary += (i ? ", " : "") + parts[i];
  if (peer.uid == 65534 && geteuid() != 65534) {
    f.level = Level::problem;
    f.summary += "; its uid is not mapped into this user namespace (it reads as 65534)";
    f.fix = "run both in user namespaces that map the producer's uid (or in none)";
    return f;
  }
  if (legacy && state["pid"] == "different") {
    f.level = Level::problem;
    f.summary += "; " + name +
                 " uses legacy CUDA IPC, and cudaIpcOpenMemHandle is refused between processes "
                 "that do not share a PID namespace";
    f.fix =
        "share the producer's PID namespace (docker run --pid=host, or "
        "--pid=container:<producer>; Kubernetes: shareProcessNamespace or hostPID), or have the "
        "producer use CUDA VMM, whose file descriptors reach readers in any PID namespace: "
        "Backend::cuda_vmm, or Backend::cuda on a device that supports VMM (ringdump doctor on "
        "the producer's machine says whether its device does)";
    return f;
  }
  if (legacy && state["ipc"] == "different") {
    f.level = Level::warning;
    f.summary += "; NVIDIA's guidance for CUDA IPC between containers is a shared IPC namespace";
    f.fix = "docker run --ipc=host, or --ipc=container:<producer>";
    return f;
  }
  if (!cuda && (state["pid"] != "same" || state["net"] != "same" || state["ipc"] != "same")) {
    f.level = Level::note;
    f.summary +=
        "; host channels work across PID, network and IPC namespaces (the socket and "
        "memfds need only the shared channel directory)";
  } else if (cuda && (state["pid"] != "same" || state["net"] != "same" || state["ipc"] != "same")) {
    f.level = Level::note;
    f.summary +=
        "; CUDA VMM works across PID, network and IPC namespaces (its file descriptors travel "
        "over the socket in the shared channel directory)";
  }
  return f;
}

// ---- NVIDIA driver, CUDA, GPU path --------------------------------------------------------------

struct Driver {
  bool libcuda = false;
  std::string libcuda_problem;
  std::vector<std::string> device_files;
};

Driver find_driver() {
  Driver d;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h != nullptr) {
    d.libcuda = true;
    dlclose(h);
  } else {
    const char* e = dlerror();  // NOLINT(concurrency-mt-unsafe): one thread
    d.libcuda_problem = e != nullptr ? e : "not loadable";
  }
  for (const char* dev : {"/dev"}) {
    DIR* dp = opendir(dev);
    if (dp == nullptr) continue;
    while (const dirent* e = readdir(dp)) {  // NOLINT(concurrency-mt-unsafe): one thread
      const std::string n = e->d_name;
      if (n.rfind("nvidia", 0) == 0 || n == "nvmap" || n.rfind("nvhost-ctrl-gpu", 0) == 0) {
        d.device_files.push_back(std::string(dev) + "/" + n);
      }
    }
    closedir(dp);
  }
  std::sort(d.device_files.begin(), d.device_files.end());
  return d;
}

Finding check_driver(const Driver& d) {
  Finding f{"nvidia_driver", "NVIDIA driver", Level::ok, "", "", Json::object()};
  f.values["libcuda_loadable"] = d.libcuda;
  f.values["libcuda_problem"] = d.libcuda ? Json(nullptr) : Json(d.libcuda_problem);
  f.values["device_files"] = d.device_files;
  std::string files;
  for (const auto& p : d.device_files) files += (files.empty() ? "" : " ") + p;
  if (d.libcuda && !d.device_files.empty()) {
    f.summary = "libcuda.so.1 loads; " + files;
    return f;
  }
  f.level = Level::note;
  f.summary = std::string(d.libcuda ? "libcuda.so.1 loads" : "libcuda.so.1 does not load") + "; " +
              (d.device_files.empty() ? std::string("no /dev/nvidia* device files") : files) +
              ": no CUDA channel here (host channels need neither)";
  return f;
}

Json opt_bool(std::optional<bool> v) {
  return v ? Json(*v) : Json(nullptr);
}

Finding check_cuda(const ipcring::CudaProbe& probe, const Driver& d) {
  Finding f{"cuda", "CUDA", Level::ok, "", "", Json::object()};
  f.values["module_loaded"] = probe.module_loaded;
  f.values["module_problem"] =
      probe.module_problem.empty() ? Json(nullptr) : Json(probe.module_problem);
  f.values["device_problem"] =
      probe.device_problem.empty() ? Json(nullptr) : Json(probe.device_problem);
  Json devices = Json::array();
  for (const auto& dev : probe.devices) {
    Json j;
    j["ordinal"] = dev.ordinal;
    j["uuid"] = dev.uuid;
    j["integrated"] = opt_bool(dev.integrated);
    j["unified_addressing"] = opt_bool(dev.unified_addressing);
    j["ipc_events"] = opt_bool(dev.ipc_events);
    j["host_register"] = opt_bool(dev.host_register);
    j["stream_mem_ops_64"] = opt_bool(dev.stream_mem_ops_64);
    j["compute_mode"] = dev.compute_mode ? Json(*dev.compute_mode) : Json(nullptr);
    j["vmm_posix_fd"] = opt_bool(dev.vmm_posix_fd);
    j["legacy_ipc_refusals"] = dev.legacy_ipc_refusals;
    j["vmm_refusals"] = dev.vmm_refusals;
    j["path"] = ipcring::to_string(dev.path);  // what Backend::cuda would take here
    j["path_reason"] = dev.path_reason;
    devices.push_back(j);
  }
  f.values["devices"] = devices;
  if (!probe.module_loaded) {
    f.level = Level::note;
    f.summary = "the CUDA backend module is not available: " + probe.module_problem;
    return f;
  }
  if (!probe.device_problem.empty()) {
    f.level = Level::note;
    f.summary = probe.device_problem;
    if (!d.libcuda) f.summary += " (" + d.libcuda_problem + ")";
    return f;
  }
  auto yes_no = [](std::optional<bool> v) { return v ? (*v ? "yes" : "no") : "unknown"; };
  for (const auto& dev : probe.devices) {
    if (!f.summary.empty()) f.summary += "; ";
    f.summary +=
        "device " + std::to_string(dev.ordinal) + " " + dev.uuid + ": stream memory operations " +
        yes_no(dev.stream_mem_ops_64) + ", host registration " + yes_no(dev.host_register) +
        ", IPC events " + yes_no(dev.ipc_events) + ", integrated " + yes_no(dev.integrated) +
        ", VMM descriptors " + yes_no(dev.vmm_posix_fd) + "\nBackend::cuda on device " +
        std::to_string(dev.ordinal) + ": " + ipcring::to_string(dev.path) + ", " + dev.path_reason;
  }
  return f;
}

// The paths frames can take, by the Backend that asks for each: host (shared memory),
// cuda_legacy (CUDA IPC handles and events), cuda_vmm (CUDA VMM allocations as file descriptors).
struct GpuPath {
  std::string chosen;  // what the channel uses / what Backend::cuda would use; "none"
  std::map<std::string, std::vector<std::string>> not_chosen;
};

// Device `device` as the probe saw it; null (with why in `problem`) when there is none to ask.
const ipcring::CudaDeviceProbe* probed_device(const ipcring::CudaProbe& probe, int device,
                                              std::string& problem) {
  if (!probe.module_loaded) {
    problem = "the CUDA backend module is not available";
    return nullptr;
  }
  if (!probe.device_problem.empty()) {
    problem = probe.device_problem;
    return nullptr;
  }
  for (const auto& d : probe.devices) {
    if (d.ordinal == device) return &d;
  }
  problem = "there is no CUDA device " + std::to_string(device) + " here";
  return nullptr;
}

const char* backend_of(ipcring::CudaPath path) {
  return path == ipcring::CudaPath::vmm ? "cuda_vmm" : "cuda_legacy";
}

const char* path_words(ipcring::CudaPath path) {
  return path == ipcring::CudaPath::vmm
             ? "CUDA VMM (allocations shared as file descriptors over the channel's socket)"
             : "legacy CUDA IPC (cudaIpcGetMemHandle, IPC events)";
}

Finding check_gpu_path(const ipcring::CudaProbe& probe, const std::optional<Snapshot>& snapshot,
                       const std::string& name) {
  Finding f{"gpu_path", "GPU path", Level::ok, "", "", Json::object()};
  std::string problem;
  const ipcring::CudaDeviceProbe* dev = probed_device(probe, 0, problem);
  // Why this process could not use each path on device 0.
  const std::vector<std::string> legacy = dev ? dev->legacy_ipc_refusals : std::vector{problem};
  const std::vector<std::string> vmm = dev ? dev->vmm_refusals : std::vector{problem};
  auto refusals_of = [&](ipcring::CudaPath p) {
    return p == ipcring::CudaPath::vmm ? vmm : legacy;
  };
  GpuPath p;
  ipcring::CudaPath path = ipcring::CudaPath::none;
  if (snapshot) {
    path = snapshot->cuda_path;
    if (path != ipcring::CudaPath::none) {
      const ipcring::CudaPath other =
          path == ipcring::CudaPath::vmm ? ipcring::CudaPath::legacy_ipc : ipcring::CudaPath::vmm;
      p.chosen = backend_of(path);
      p.not_chosen["host"] = {"the producer created " + name + " with a CUDA backend"};
      std::vector<std::string> why_not = {
          "the producer took " + std::string(ipcring::to_string(path)) + " for " + name +
          " (its request, or Backend::cuda's choice on its device: VMM wherever it is offered)"};
      for (const auto& w : refusals_of(other)) why_not.push_back("here too, " + w);
      p.not_chosen[backend_of(other)] = why_not;
      f.summary = name + " carries GPU frames over " + path_words(path);
      const std::vector<std::string> here = refusals_of(path);
      if (!here.empty()) {
        f.level = Level::problem;
        f.summary += ", which this process cannot open: " + here.front();
        f.fix =
            "read " + name + " from a process that sees the producer's GPU with a driver that " +
            (path == ipcring::CudaPath::vmm ? "exports CUDA VMM memory as file descriptors"
                                            : "supports CUDA IPC") +
            ", or have the producer use " +
            (path == ipcring::CudaPath::vmm ? "Backend::cuda_legacy or " : "") + "Backend::host";
      }
    } else {
      p.chosen = "host";
      p.not_chosen["cuda_legacy"] = {"the producer created " + name + " with Backend::host"};
      p.not_chosen["cuda_vmm"] = {"the producer created " + name + " with Backend::host"};
      f.summary = name + " carries host frames in shared memory (no GPU path is involved)";
    }
  } else {
    path = dev ? dev->path : ipcring::CudaPath::none;
    if (path == ipcring::CudaPath::none) {
      p.chosen = "none";
      p.not_chosen["cuda_legacy"] = legacy;
      p.not_chosen["cuda_vmm"] = vmm;
      f.level = Level::note;
      f.summary = "a Backend::cuda channel made here would be refused; Backend::host works";
    } else {
      const ipcring::CudaPath other =
          path == ipcring::CudaPath::vmm ? ipcring::CudaPath::legacy_ipc : ipcring::CudaPath::vmm;
      p.chosen = backend_of(path);
      std::vector<std::string> why_not = refusals_of(other);
      if (why_not.empty()) {  // both work: Backend::cuda prefers VMM
        why_not.push_back(
            "device 0 supports it too, but Backend::cuda prefers CUDA VMM, which reaches readers "
            "in other PID namespaces and containers (Backend::cuda_legacy pins legacy CUDA IPC)");
      }
      p.not_chosen[backend_of(other)] = why_not;
      f.summary = "a Backend::cuda channel made here would use " + std::string(path_words(path)) +
                  " on device 0 (why: the CUDA check above)";
    }
  }
  f.values["chosen"] = p.chosen;
  f.values["cuda_path"] = ipcring::to_string(path);
  f.values["reason"] = snapshot || dev == nullptr ? Json(nullptr) : Json(dev->path_reason);
  Json nc = Json::object();
  for (const auto& [path_name, why] : p.not_chosen) nc[path_name] = why;
  f.values["not_chosen"] = nc;
  for (const auto& [path_name, why] : p.not_chosen) {
    for (const auto& w : why) f.summary += "\n" + path_name + " not used: " + w;
  }
  return f;
}

// ---- memlock ------------------------------------------------------------------------------------

Finding check_memlock(const std::optional<Snapshot>& snapshot) {
  Finding f{"memlock", "memlock", Level::ok, "", "", Json::object()};
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
    f.level = Level::unknown;
    f.summary = std::string("getrlimit: ") + ipcring::detail::errno_detail(errno);
    return f;
  }
  const bool unlimited = rl.rlim_cur == RLIM_INFINITY;
  f.values["soft_bytes"] =
      unlimited ? Json(nullptr) : Json(static_cast<std::uint64_t>(rl.rlim_cur));
  f.values["hard_bytes"] =
      rl.rlim_max == RLIM_INFINITY ? Json(nullptr) : Json(static_cast<std::uint64_t>(rl.rlim_max));
  f.summary = "RLIMIT_MEMLOCK " +
              (unlimited ? std::string("unlimited") : format_bytes(rl.rlim_cur)) +
              "; host channels lock no memory, CUDA channels register their control segment "
              "(cudaHostRegister) for the release fences";
  if (snapshot && snapshot->backend == ipcring::Backend::cuda && !unlimited &&
      rl.rlim_cur < snapshot->segment_bytes) {
    f.level = Level::warning;
    f.summary += ", and " + snapshot->name + "'s is " + format_bytes(snapshot->segment_bytes) +
                 ", more than the limit";
    f.fix =
        "raise the limit (ulimit -l, LimitMEMLOCK= in the unit, docker run --ulimit "
        "memlock=-1)";
  }
  return f;
}

std::string render(const std::string& name, const std::string& dir,
                   const std::vector<Finding>& findings, int problems, int warnings) {
  std::string out =
      paint("ringdump doctor", kBold) + (name.empty() ? "" : ": " + name) + " (" + dir + ")\n";
  std::size_t width = 0;
  for (const auto& f : findings) width = std::max(width, f.title.size());
  for (const auto& f : findings) {
    const std::string lvl = level_name(f.level);
    std::string lines = f.summary;
    const std::string indent(2 + 8 + 1 + width + 2, ' ');
    std::string body;
    std::size_t start = 0;
    bool first = true;
    while (start <= lines.size()) {
      const auto nl = std::min(lines.find('\n', start), lines.size());
      body += (first ? "" : "\n" + indent) + lines.substr(start, nl - start);
      first = false;
      start = nl + 1;
    }
    out += "  " + paint(lvl, level_colour(f.level)) + std::string(8 - lvl.size(), ' ') + " " +
           f.title + std::string(width - f.title.size(), ' ') + "  " + body + "\n";
    if (!f.fix.empty()) out += indent + "fix: " + f.fix + "\n";
  }
  if (problems == 0) {
    out +=
        paint("this setup can work", kGreen) +
        (warnings ? " (" + std::to_string(warnings) + " warning" + (warnings > 1 ? "s" : "") + ")"
                  : std::string()) +
        "\n";
  } else {
    out += paint("this setup cannot work", kRed) + ": " + std::to_string(problems) + " problem" +
           (problems > 1 ? "s" : "") + ", each with its fix above\n";
  }
  return out;
}

}  // namespace

int cmd_doctor(const std::string& name, bool json) {
  if (!name.empty()) ipcring::validate_name(name);
  const std::string dir = ipcring::channel_directory();
  std::vector<Finding> findings;
  std::optional<ipcring::NameInfo> info;
  findings.push_back(check_directory(name, dir, info));
  findings.push_back(check_shm(dir));
  findings.push_back(check_remove_ipc(dir));

  std::optional<Snapshot> snapshot;
  if (info && info->state == ipcring::NameState::live) {
    try {
      snapshot = ipcring::inspect(name);
    } catch (const ipcring::Error& e) {
      findings.push_back(Finding{
          "channel", "channel", Level::problem, std::string("cannot inspect it: ") + e.what(),
          "as the message says (ringdump show " + name + " gives the same)", Json::object()});
    }
    findings.push_back(
        check_namespaces(*info, snapshot ? snapshot->cuda_path : ipcring::CudaPath::none, name));
  } else if (!name.empty()) {
    findings.push_back(Finding{"channel", "channel", Level::note,
                               name + " has no live producer; what follows is what a producer "
                                      "started here would get",
                               "", Json::object()});
  }

  const Driver driver = find_driver();
  findings.push_back(check_driver(driver));
  const ipcring::CudaProbe probe = ipcring::probe_cuda();
  findings.push_back(check_cuda(probe, driver));
  findings.push_back(check_gpu_path(probe, snapshot, name));
  findings.push_back(check_memlock(snapshot));

  int problems = 0;
  int warnings = 0;
  for (const auto& f : findings) {
    problems += f.level == Level::problem ? 1 : 0;
    warnings += f.level == Level::warning ? 1 : 0;
  }
  if (json) {
    Json j;
    j["schema_version"] = kSchemaVersion;
    j["channel"] = name.empty() ? Json(nullptr) : Json(name);
    j["directory"] = dir;
    j["can_work"] = problems == 0;
    j["problems"] = problems;
    j["warnings"] = warnings;
    Json checks = Json::array();
    for (const auto& f : findings) {
      Json c;
      c["check"] = f.check;
      c["level"] = level_name(f.level);
      c["summary"] = f.summary;
      c["fix"] = f.fix.empty() ? Json(nullptr) : Json(f.fix);
      c["values"] = f.values;
      checks.push_back(c);
    }
    j["checks"] = checks;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::fputs(render(name, dir, findings, problems, warnings).c_str(), stdout);
  }
  return problems == 0 ? kExitOk : kExitUnhealthy;
}

}  // namespace ringdump
