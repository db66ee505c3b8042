/* stats_setuid - a root daemon that drops privileges, for test_stats_setuid.sh.
 *
 *   stats_setuid GOFILE
 *
 * Run as root with HAKOZUNA_STATS=1 and the library preloaded.  It publishes stats,
 * forks a worker that publishes a segment of its own (still as root), and both print
 *
 *   parent PID        worker PID
 *
 * then wait until GOFILE exists.  The worker then setuid()s to nobody (65534) and
 * exits normally with exit(); the parent waits for it, setuid()s to nobody and
 * returns from main.  Exit status 0 if all of that worked.
 */
#define _GNU_SOURCE 1

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Slow-path allocations for a while: the library publishes from there (and a child
 * of fork makes its own segment). */
static void churn(void) {
    for (int round = 0; round < 4; round++) {
        void *v[64];
        for (int i = 0; i < 64; i++) v[i] = malloc((size_t)(16 << (i % 14)));
        for (int i = 0; i < 64; i++) free(v[i]);
        /* A large block: its allocation passes the slow path in every variant (the
         * hardened one's quarantine may keep the loop above on its fast paths). */
        char *volatile big = malloc((size_t)3 << 20);
        free(big);
        sleep_ms(60);
    }
}

static void wait_go(const char *go) {
    for (int i = 0; i < 600 && access(go, F_OK) != 0; i++) sleep_ms(50);
}

static int drop(void) {
    if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
        fprintf(stderr, "stats_setuid: dropping privileges: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: stats_setuid GOFILE\n");
        return 2;
    }
    churn();
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        churn();
        printf("worker %ld\n", (long)getpid());
        fflush(stdout);
        wait_go(argv[1]);
        exit(drop() == 0 ? 0 : 1);
    }
    printf("parent %ld\n", (long)getpid());
    fflush(stdout);
    wait_go(argv[1]);
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 1;
    return drop() == 0 ? 0 : 1;
}
