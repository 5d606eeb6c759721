// ThrowawayPostgres: initdb and postgres as child processes, stopped by pid.

#include "throwaway_postgres.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace paddock::pg {
namespace {

namespace fs = std::filesystem;

constexpr absl::Duration kStartTimeout = absl::Seconds(60);
constexpr absl::Duration kStopTimeout = absl::Seconds(60);
constexpr absl::Duration kPauseTimeout = absl::Seconds(5);

bool IsExecutable(const fs::path& p) { return ::access(p.c_str(), X_OK) == 0; }

// A libpq conninfo value in single quotes (backslash and quote escaped).
std::string Quoted(const std::string& value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

// The directory to create the cluster in: $TMPDIR unless its path would make
// the socket's (DIR/.s.PGSQL.5432) longer than a unix socket path may be.
std::string TempBase() {
  const char* tmpdir = std::getenv("TMPDIR");
  if (tmpdir != nullptr && tmpdir[0] != '\0' && std::strlen(tmpdir) <= 60) {
    return tmpdir;
  }
  return "/tmp";
}

// What a child process does between fork and exec. Only async-signal-safe
// calls happen in the child, since the parent may have other threads.
struct ChildSetup {
  std::vector<std::string> args;
  std::string log_path;
  std::string work_dir;
  int cpu = -1;
  int nice = 0;
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  int parent_death_signal = SIGKILL;
};

absl::StatusOr<pid_t> Spawn(const ChildSetup& setup) {
  // Everything the child needs is built before fork.
  std::vector<char*> argv;
  for (const std::string& a : setup.args) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (setup.cpu >= 0) CPU_SET(setup.cpu, &cpus);
  sigset_t no_signals;
  sigemptyset(&no_signals);
  const pid_t parent = ::getpid();
  // The calling thread's niceness (per thread on Linux), which the child
  // inherits; -1 is a valid value, so errno tells failure.
  errno = 0;
  const int base_nice = ::getpriority(PRIO_PROCESS, 0);
  const bool renice = setup.nice != 0 && errno == 0;

  const pid_t pid = ::fork();
  if (pid < 0) {
    return absl::ErrnoToStatus(errno, "ThrowawayPostgres: fork");
  }
  if (pid > 0) return pid;

  // The child.
  if (setup.cpu >= 0) ::sched_setaffinity(0, sizeof(cpus), &cpus);
  if (renice) ::setpriority(PRIO_PROCESS, 0, base_nice + setup.nice);
  ::signal(SIGPIPE, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &no_signals, nullptr);
  if (setup.uid != static_cast<uid_t>(-1)) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(setup.gid) != 0 ||
        ::setuid(setup.uid) != 0) {
      ::_exit(126);
    }
  }
  // After setuid, which clears it: quit when the starting thread is gone.
  ::prctl(PR_SET_PDEATHSIG, setup.parent_death_signal);
  if (::getppid() != parent) ::_exit(1);
  if (::chdir(setup.work_dir.c_str()) != 0) ::_exit(126);
  const int log = ::open(setup.log_path.c_str(),
                         O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log < 0 || null < 0) ::_exit(126);
  ::dup2(null, 0);
  ::dup2(log, 1);
  ::dup2(log, 2);
  // No descriptor of the parent (sockets, pipes) stays open in the server.
  ::close_range(3, ~0U, 0);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (text.size() > bytes) text = "..." + text.substr(text.size() - bytes);
  return text;
}

// The state letter (R, S, T, ...) and the parent of process `pid`, from
// /proc/PID/stat; false if it is gone.
bool ReadProcStat(pid_t pid, char* state, pid_t* parent) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return false;
  // "PID (COMM) STATE PPID ...", where COMM may hold spaces and parentheses.
  const size_t comm_end = line.rfind(')');
  if (comm_end == std::string::npos) return false;
  std::istringstream rest(line.substr(comm_end + 1));
  return static_cast<bool>(rest >> *state >> *parent);
}

// The processes whose parent is `parent`.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc", ec)) {
    int pid = 0;
    char state = 0;
    pid_t ppid = -1;
    if (absl::SimpleAtoi(e.path().filename().string(), &pid) &&
        ReadProcStat(pid, &state, &ppid) && ppid == parent) {
      children.push_back(pid);
    }
  }
  return children;
}

}  // namespace

absl::StatusOr<std::string> ThrowawayPostgres::FindBinDir() {
  auto has_server = [](const fs::path& dir) {
    return IsExecutable(dir / "initdb") && IsExecutable(dir / "postgres");
  };
  if (const char* env = std::getenv("PADDOCK_PG_BINDIR"); env != nullptr) {
    if (has_server(env)) return std::string(env);
    return absl::NotFoundError(
        absl::StrCat("ThrowawayPostgres: PADDOCK_PG_BINDIR=", env,
                     " holds no initdb and postgres"));
  }
  // Debian: /usr/lib/postgresql/<major>/bin. The newest major wins.
  std::error_code ec;
  int best_major = -1;
  std::string best;
  for (const fs::directory_entry& e :
       fs::directory_iterator("/usr/lib/postgresql", ec)) {
    int major = 0;
    if (absl::SimpleAtoi(e.path().filename().string(), &major) &&
        major > best_major && has_server(e.path() / "bin")) {
      best_major = major;
      best = (e.path() / "bin").string();
    }
  }
  if (best_major >= 0) return best;
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    for (absl::string_view dir : absl::StrSplit(path, ':')) {
      if (!dir.empty() && has_server(fs::path(std::string(dir)))) {
        return std::string(dir);
      }
    }
  }
  return absl::NotFoundError(
      "ThrowawayPostgres: no PostgreSQL server programs (initdb, postgres) "
      "in /usr/lib/postgresql/*/bin or on PATH; install them with "
      "`apt-get install postgresql` or set PADDOCK_PG_BINDIR");
}

ThrowawayPostgres::ThrowawayPostgres(std::string bin_dir, std::string dir,
                                     ThrowawayPostgresOptions options)
    : bin_dir_(std::move(bin_dir)),
      dir_(std::move(dir)),
      options_(std::move(options)),
      conninfo_(absl::StrCat("host=", Quoted(dir_),
                             " dbname=postgres user=postgres")) {}

absl::StatusOr<std::unique_ptr<ThrowawayPostgres>> ThrowawayPostgres::Start(
    ThrowawayPostgresOptions options) {
  absl::StatusOr<std::string> bin_dir = FindBinDir();
  if (!bin_dir.ok()) return bin_dir.status();

  std::string pattern = TempBase() + "/paddock-pg.XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("ThrowawayPostgres: mkdtemp ", pattern));
  }
  // From here on the destructor removes the directory.
  std::unique_ptr<ThrowawayPostgres> server(
      new ThrowawayPostgres(*std::move(bin_dir), pattern, std::move(options)));

  if (::geteuid() == 0) {
    // initdb and postgres refuse to run as root.
    const passwd* user = ::getpwnam("postgres");
    if (user == nullptr) {
      return absl::NotFoundError(
          "ThrowawayPostgres: running as root, the server must run as an "
          "unprivileged user, and there is no `postgres` user (it comes "
          "with `apt-get install postgresql`)");
    }
    server->run_uid_ = user->pw_uid;
    server->run_gid_ = user->pw_gid;
    if (::chown(server->dir_.c_str(), server->run_uid_, server->run_gid_) !=
        0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("ThrowawayPostgres: chown ", server->dir_));
    }
  }
  if (absl::Status s = server->InitDb(); !s.ok()) return s;
  if (absl::Status s = server->Launch(); !s.ok()) return s;
  return server;
}

ThrowawayPostgres::~ThrowawayPostgres() {
  Stop().IgnoreError();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

absl::Status ThrowawayPostgres::InitDb() {
  ChildSetup setup;
  setup.args = {bin_dir_ + "/initdb",
                "-D",
                dir_ + "/data",
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale",
                "C",
                "--no-sync"};
  setup.log_path = dir_ + "/initdb.log";
  setup.work_dir = dir_;
  setup.uid = run_uid_;
  setup.gid = run_gid_;
  absl::StatusOr<pid_t> pid = Spawn(setup);
  if (!pid.ok()) return pid.status();
  int status = 0;
  while (::waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat("ThrowawayPostgres: initdb failed (wait status ", status,
                     "):\n", Tail(setup.log_path, 2000)));
  }
  return absl::OkStatus();
}

absl::Status ThrowawayPostgres::Launch() {
  ChildSetup setup;
  setup.args = {bin_dir_ + "/postgres",
                "-D",
                dir_ + "/data",
                "-k",
                dir_,
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                absl::StrCat("max_connections=", options_.max_connections)};
  for (const std::string& s : options_.settings) {
    setup.args.push_back("-c");
    setup.args.push_back(s);
  }
  setup.log_path = dir_ + "/postgres.log";
  setup.work_dir = dir_;
  setup.cpu = options_.cpu;
  setup.nice = options_.nice;
  setup.uid = run_uid_;
  setup.gid = run_gid_;
  // SIGQUIT: an immediate shutdown, which also ends the server's children.
  setup.parent_death_signal = SIGQUIT;
  absl::StatusOr<pid_t> pid = Spawn(setup);
  if (!pid.ok()) return pid.status();
  pid_ = *pid;

  const absl::Time deadline = absl::Now() + kStartTimeout;
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat(
          "ThrowawayPostgres: the server exited at start (wait status ", status,
          "):\n", LogTail()));
    }
    if (PQping(conninfo_.c_str()) == PQPING_OK) return absl::OkStatus();
    if (absl::Now() > deadline) {
      const std::string log = LogTail();
      WaitForExit(SIGQUIT).IgnoreError();
      return absl::InternalError(absl::StrCat(
          "ThrowawayPostgres: the server did not accept connections within ",
          absl::FormatDuration(kStartTimeout), ":\n", log));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::Status ThrowawayPostgres::WaitForExit(int signal) {
  if (pid_ < 0) return absl::OkStatus();
  // A stopped postmaster would hold the signal until SIGKILL, and its stopped
  // children would outlive it. A failed SIGCONT ends in SIGKILL below.
  Resume().IgnoreError();
  const pid_t pid = pid_;
  pid_ = -1;
  if (::kill(pid, signal) != 0 && errno != ESRCH) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("ThrowawayPostgres: kill ", pid));
  }
  const absl::Time deadline = absl::Now() + kStopTimeout;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return absl::OkStatus();
    if (absl::Now() > deadline) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return absl::DeadlineExceededError(
      absl::StrCat("ThrowawayPostgres: the server (pid ", pid,
                   ") did not exit within ", absl::FormatDuration(kStopTimeout),
                   " of signal ", signal, "; killed it"));
}

absl::Status ThrowawayPostgres::Stop() { return WaitForExit(SIGINT); }

absl::Status ThrowawayPostgres::Kill() { return WaitForExit(SIGQUIT); }

absl::StatusOr<int> ThrowawayPostgres::Pause() {
  if (pid_ < 0) {
    return absl::FailedPreconditionError("ThrowawayPostgres: not running");
  }
  if (paused()) {
    return absl::FailedPreconditionError("ThrowawayPostgres: already paused");
  }
  // The postmaster first, so that it starts no process after the others are
  // listed.
  if (::kill(pid_, SIGSTOP) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("ThrowawayPostgres: SIGSTOP to ", pid_));
  }
  paused_.push_back(pid_);
  for (pid_t child : ChildrenOf(pid_)) {
    // One that has exited meanwhile needs no stopping.
    if (::kill(child, SIGSTOP) == 0) paused_.push_back(child);
  }
  const absl::Time deadline = absl::Now() + kPauseTimeout;
  for (pid_t pid : paused_) {
    char state = 0;
    pid_t parent = -1;
    // Stopped, or a zombie: one that exited before its SIGSTOP waits for the
    // stopped postmaster to reap it.
    while (ReadProcStat(pid, &state, &parent) && state != 'T' && state != 'Z') {
      if (absl::Now() > deadline) {
        const size_t stopped = paused_.size();
        Resume().IgnoreError();
        return absl::InternalError(absl::StrCat(
            "ThrowawayPostgres: process ", pid, " (one of ", stopped,
            ") not stopped within ", absl::FormatDuration(kPauseTimeout),
            " of SIGSTOP (state ", std::string(1, state), ")"));
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  return static_cast<int>(paused_.size());
}

absl::Status ThrowawayPostgres::Resume() {
  absl::Status status;
  // In the reverse order of Pause(): the postmaster last.
  for (auto it = paused_.rbegin(); it != paused_.rend(); ++it) {
    if (::kill(*it, SIGCONT) != 0 && errno != ESRCH && status.ok()) {
      status = absl::ErrnoToStatus(
          errno, absl::StrCat("ThrowawayPostgres: SIGCONT to ", *it));
    }
  }
  paused_.clear();
  return status;
}

absl::Status ThrowawayPostgres::Restart() {
  if (pid_ >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("ThrowawayPostgres: already running (pid ", pid_, ")"));
  }
  return Launch();
}

std::string ThrowawayPostgres::LogTail() const {
  return Tail(dir_ + "/postgres.log", 2000);
}

}  // namespace paddock::pg
