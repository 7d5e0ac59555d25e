/* Native stack of the crashing thread, for trials that die of a signal.
 *
 * Python's faulthandler (PYTHONFAULTHANDLER=1, set by the runner) prints the Python frames of a
 * segfault, and stops there: the H200 campaign's segfaults during garbage collection showed
 * "Garbage-collecting" and nothing of the finaliser's C++ (REPORT.md, 2026-11-29). Loaded with
 * LD_PRELOAD, this library installs a handler for the fatal signals before the interpreter
 * starts; faulthandler installs its own later, dumps the Python stacks, restores the previous
 * handler (this one) and raises the signal again, so this handler runs second, in the same
 * thread, and writes the native frames (backtrace_symbols_fd: `lib(symbol+off)[addr]`) to
 * stderr. Then it restores the default action and raises once more: the process still dies of
 * the same signal, with the same exit status.
 *
 * Only async-signal-safe calls in the handler: backtrace() is called once at load time so that
 * libgcc's unwinder is loaded then rather than by malloc inside the handler.
 */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define MAX_FRAMES 96

static const int FATAL[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

static void say(const char *text) {
    ssize_t ignored = write(STDERR_FILENO, text, strlen(text));
    (void)ignored;
}

static void on_fatal(int signum, siginfo_t *info, void *context) {
    static volatile sig_atomic_t entered = 0;
    (void)info;
    (void)context;
    if (!entered) {
        entered = 1;
        void *frames[MAX_FRAMES];
        int n = backtrace(frames, MAX_FRAMES);
        say("\nNative stack of the crashing thread (most recent call first):\n");
        backtrace_symbols_fd(frames, n, STDERR_FILENO);
        say("End of native stack\n");
    }
    signal(signum, SIG_DFL);
    raise(signum);
}

__attribute__((constructor)) static void install(void) {
    void *warm[2];
    backtrace(warm, 2);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fatal;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < sizeof FATAL / sizeof FATAL[0]; i++)
        sigaction(FATAL[i], &action, NULL);
}
