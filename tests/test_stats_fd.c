/* test_stats_fd.c - stats mode never touches a descriptor the program owns.
 *
 * Runs itself again with HAKOZUNA_STATS=1 so that the preloaded library publishes
 * stats.  It then closes every descriptor from 3 up (as daemons do), opens a file of
 * its own, which gets the lowest free number (the one the library may remember), and
 * moves a second file onto numbers 4..9 with dup2.  It forks: the child, whose atfork
 * handlers have run, and the parent each check that every descriptor still refers to
 * the same file (device and inode), keeps its flags, and can be written and read.
 * The child publishes a segment of its own before checking.  A library that closed a
 * remembered number in the child would have closed the program's file.
 */
#include "hz_test.h"

#include <sys/stat.h>
#include <sys/wait.h>

#define NDUP 6

static char path1[64], path2[64];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Slow-path allocations for a while: the library publishes (and a child of fork
 * makes its own segment) from there. */
static void churn(void)
{
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

static int maps_segment(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL) return -1;
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (strstr(line, "/dev/shm/hakozuna.") != NULL) found = 1;
    fclose(f);
    return found;
}

static void check_fd(const char *who, int fd, const struct stat *want, int want_fdflags, char tag)
{
    struct stat st;
    CHECK(fstat(fd, &st) == 0, "%s: fd %d: fstat: %s (the library closed it)", who, fd,
          strerror(errno));
    CHECK(st.st_dev == want->st_dev && st.st_ino == want->st_ino,
          "%s: fd %d refers to another file (inode %lu, expected %lu)", who, fd,
          (unsigned long)st.st_ino, (unsigned long)want->st_ino);
    int fl = fcntl(fd, F_GETFD);
    CHECK(fl == want_fdflags, "%s: fd %d descriptor flags %d, expected %d", who, fd, fl,
          want_fdflags);
    CHECK(pwrite(fd, &tag, 1, 0) == 1, "%s: fd %d: write: %s", who, fd, strerror(errno));
    char back = 0;
    CHECK(pread(fd, &back, 1, 0) == 1 && back == tag, "%s: fd %d: read back", who, fd);
}

int main(int argc, char **argv)
{
    (void)argc;
    hz_test_rerun_with(argv, "HAKOZUNA_STATS", "1");
    churn();
    CHECK(maps_segment() == 1, "the library publishes no stats segment");

    /* Close everything from 3 up, as daemons do after start. */
    for (int fd = 3; fd < 1024; fd++) close(fd);

    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || strlen(tmp) > 30) tmp = "/tmp";
    snprintf(path1, sizeof path1, "%s/hz-fd1.%ld", tmp, (long)getpid());
    snprintf(path2, sizeof path2, "%s/hz-fd2.%ld", tmp, (long)getpid());
    int fd1 = open(path1, O_RDWR | O_CREAT | O_TRUNC, 0600); /* no O_CLOEXEC */
    CHECK(fd1 == 3, "open: got fd %d, expected 3", fd1);
    int fd2 = open(path2, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd2 >= 0, "open %s: %s", path2, strerror(errno));
    unlink(path1);
    unlink(path2);
    struct stat st1, st2;
    CHECK(fstat(fd1, &st1) == 0 && fstat(fd2, &st2) == 0, "fstat");
    for (int fd = 4; fd < 4 + NDUP; fd++)
        if (fd != fd2) CHECK(dup2(fd2, fd) == fd, "dup2 onto %d: %s", fd, strerror(errno));
    if (fd2 >= 4 + NDUP) close(fd2);
    int fd2flags = 0; /* dup2 clears FD_CLOEXEC on the copies */

    churn(); /* publishes with the descriptors in place */
    pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        churn(); /* the child makes its own segment */
        check_fd("child", fd1, &st1, 0, 'c');
        for (int fd = 4; fd < 4 + NDUP; fd++)
            check_fd("child", fd, &st2, fd == fd2 ? FD_CLOEXEC : fd2flags, 'c');
        CHECK(maps_segment() == 1, "child: no stats segment of its own");
        exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status 0x%x)", status);
    churn();
    check_fd("parent", fd1, &st1, 0, 'p');
    for (int fd = 4; fd < 4 + NDUP; fd++)
        check_fd("parent", fd, &st2, fd == fd2 ? FD_CLOEXEC : fd2flags, 'p');
    printf("PASS: descriptors 3..%d intact in parent and child of fork under HAKOZUNA_STATS=1\n",
           3 + NDUP);
    return 0;
}
