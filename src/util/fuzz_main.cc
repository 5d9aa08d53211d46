// main() for the fuzz targets (*-fuzz.cc) in builds without libFuzzer: runs
// LLVMFuzzerTestOneInput once on every file named on the command line, or in every directory
// named there, so ctest replays the seed corpus and the inputs that once crashed a target in the
// plain, ASAN and TSAN builds too. A crash or a failed check aborts, as under libFuzzer.
// build-support/fuzz.sh builds the same targets with libFuzzer to search for new inputs.
//
// The replay also interrupts the target's thread with a signal every 100 us (see
// InterruptEvery100Microseconds): libFuzzer does so too, rarely, and a harness must take it in
// stride.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));
// LeakSanitizer's check, present in ASAN builds.
extern "C" void __lsan_do_leak_check() __attribute__((weak));

namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The regular files directly inside `dir`, sorted so runs are repeatable.
std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* e = readdir(d)) {
    const std::string path = dir + "/" + e->d_name;
    struct stat st;
    if (e->d_name[0] != '.' && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      files.push_back(path);
    }
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

// libFuzzer sends SIGALRM every -timeout/2 + 1 seconds (13 s under fuzz.sh) to look for a hung
// input, with a handler that does not restart interrupted calls; and a socket call with a timeout
// (SO_RCVTIMEO) is never restarted anyway (signal(7)): it fails with EINTR. A harness that took
// that for the server's answer failed at random on a loaded machine (tls_connection-fuzz, whose
// blocking SSL_connect read EINTR as a failed handshake). Here it happens on every input: the
// thread that runs the inputs gets a SIGALRM every 100 us, so such a harness fails its replay
// at once, in every build.
void InterruptEvery100Microseconds() {
  struct sigaction action = {};
  action.sa_handler = [](int) {};
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART, like libFuzzer's
  if (sigaction(SIGALRM, &action, nullptr) != 0) abort();
  sigevent event = {};
  event.sigev_notify = SIGEV_THREAD_ID;  // this thread only: the targets' own threads are left be
  event._sigev_un._tid = gettid();
  event.sigev_signo = SIGALRM;
  timer_t timer;
  if (timer_create(CLOCK_MONOTONIC, &event, &timer) != 0) abort();
  const itimerspec every_100us = {{0, 100000}, {0, 100000}};
  if (timer_settime(timer, 0, &every_100us, nullptr) != 0) abort();
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;  // a libFuzzer flag: nothing to do here
    if (IsDirectory(arg)) {
      for (std::string& f : FilesIn(arg)) inputs.push_back(std::move(f));
    } else {
      inputs.push_back(arg);
    }
  }
  if (inputs.empty()) {
    fprintf(stderr, "usage: %s FILE_OR_DIR...  (no inputs found)\n", argv[0]);
    return 2;
  }
  InterruptEvery100Microseconds();
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      fprintf(stderr, "cannot read %s\n", path.c_str());
      return 2;
    }
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  printf("ran %zu inputs\n", inputs.size());
  fflush(stdout);
  // The connection targets keep a live server for the whole process (libFuzzer exits without
  // teardown), whose threads may still be closing the last input's connection, and logging it:
  // returning from main would destroy glog's locks under them (TSAN reports it). So the leak
  // check runs now, and the process ends without static destructors.
  if (__lsan_do_leak_check != nullptr) __lsan_do_leak_check();
  _exit(0);
}
