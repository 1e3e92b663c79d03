/* DeviceKit plugin helpers: keep a coverage build's counters when its
 * conformance worker is stopped (coverage builds only; never in a release).
 *
 * A plugin built with --coverage (gcc or clang) writes its branch counters
 * (.gcda files) when the process that loaded it exits normally. The
 * conformance suite stops a worker whose case runs past --timeout with
 * SIGTERM, waits a few seconds, then sends SIGKILL to its process group:
 * without a handler SIGTERM ends the process at once and the
 * counters of every case that worker ran are lost, so a run's coverage would
 * depend on which cases timed out.
 *
 * Include this header in exactly ONE translation unit of a coverage build
 * (the scaffold's src/plugin.c does under -DPLUGIN_COVERAGE): when the
 * library is loaded, it installs a SIGTERM handler that writes the counters
 * (__gcov_dump) and then ends the process with SIGTERM as before. It leaves
 * a handler the process installed before alone. Only in a build compiled and
 * linked with --coverage: elsewhere __gcov_dump is undefined, and the link
 * (-Wl,--no-undefined) says so. Header-only C99 or C++; nothing crosses the
 * plugin boundary. */
#ifndef DEVICEKIT_PLUGIN_COVERAGE_H_
#define DEVICEKIT_PLUGIN_COVERAGE_H_

#include <signal.h>

#if defined(__GNUC__) || defined(__clang__)

#ifdef __cplusplus
extern "C" {
#endif
/* libgcov (gcc) and compiler-rt's profile runtime (clang) both define it. */
void __gcov_dump(void);
#ifdef __cplusplus
}
#endif

static void dkh_coverage_flush_on_sigterm_(int sig) {
  __gcov_dump();
  signal(sig, SIG_DFL);
  raise(sig); /* the exit status still says SIGTERM */
}

__attribute__((constructor)) static void dkh_coverage_install_(void) {
  void (*previous)(int);
  previous = signal(SIGTERM, dkh_coverage_flush_on_sigterm_);
  if (previous != SIG_DFL && previous != SIG_ERR) signal(SIGTERM, previous);
}

#endif /* __GNUC__ || __clang__ */

#endif /* DEVICEKIT_PLUGIN_COVERAGE_H_ */
