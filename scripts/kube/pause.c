/* The one program of the test image (scripts/kube/test-image.sh): a pod's pause (sandbox)
 * container and its workload. No argument: sleep until SIGTERM/SIGINT, reaping children.
 * "spin": burn CPU until signalled (a container a CPU cap visibly holds back). */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(int argc, char **argv) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    signal(SIGCHLD, reap);
    if (argc > 1 && strcmp(argv[1], "spin") == 0) {
        volatile unsigned long n = 0;
        for (;;) n++;
    }
    for (;;) pause();
}
