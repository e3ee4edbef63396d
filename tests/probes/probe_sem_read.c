/*
 * probe_sem_read -- print the live value of each evl probe semaphore of a
 * running process, or change one.
 *
 *   probe_sem_read PID
 *   probe_sem_read PID --add NAME DELTA
 *
 * Prints "name value" for every probe of EVL_PROBE_LIST.  With --add it
 * adds DELTA (-1 or 1) to evl:NAME's semaphore instead, as a tracer
 * attaching or detaching does, and prints "name new-value": a raised
 * semaphore with no uprobe on its site makes the loop do its share of the
 * probe's work (for evl:batch, record every event into its buffer) and
 * call a probe site that is a no-op.  The read and the write are two
 * accesses, not one atomic add: for benchmarks with no tracer attached,
 * which a concurrent attach would race with.  The semaphore's
 * link-time address comes from the stapsdt note of /proc/PID/exe; it is
 * turned into a file offset with the section headers, and the file offset
 * into a run-time address with the mapping of the executable in
 * /proc/PID/maps that covers it (works for PIE and non-PIE alike).  The
 * two bytes are read from /proc/PID/mem.  Exit 1 on any error.
 */
#include "evl-probes.h"
#include "stapsdt.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const names[] = {
#define XX(name, nargs, doc) #name,
    EVL_PROBE_LIST(XX)
#undef XX
};
#define NNAMES (sizeof names / sizeof names[0])

/* Run-time address of file offset off of the executable (inode ino). */
static int runtime_addr(long pid, unsigned long ino, uint64_t off, uint64_t *addr)
{
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%ld/maps", pid);
    FILE *m = fopen(path, "re");
    if (!m)
        return -1;
    int found = -1;
    while (fgets(line, sizeof line, m)) {
        unsigned long lo, hi, moff, inode;
        char perms[8], dev[32];
        if (sscanf(line, "%lx-%lx %7s %lx %31s %lu", &lo, &hi, perms, &moff, dev, &inode) != 6)
            continue;
        if (inode != ino || off < moff || off >= moff + (hi - lo))
            continue;
        *addr = lo + (off - moff);
        found = 0;
        break;
    }
    fclose(m);
    return found;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    long delta = 0;
    if (argc == 5 && strcmp(argv[2], "--add") == 0) {
        only = argv[3];
        delta = strtol(argv[4], NULL, 10);
    }
    if (argc != 2 && !(only && (delta == 1 || delta == -1))) {
        fprintf(stderr, "usage: %s PID [--add NAME 1|-1]\n", argv[0]);
        return 2;
    }
    long pid = strtol(argv[1], NULL, 10);
    char exe[64], mem[64], err[512];
    snprintf(exe, sizeof exe, "/proc/%ld/exe", pid);
    snprintf(mem, sizeof mem, "/proc/%ld/mem", pid);
    struct stat st;
    if (stat(exe, &st) != 0) {
        fprintf(stderr, "probe_sem_read: %s: %m\n", exe);
        return 1;
    }
    struct ls_sdt_file f;
    if (ls_sdt_open(exe, &f, err, sizeof err) != 0) {
        fprintf(stderr, "probe_sem_read: %s\n", err);
        return 1;
    }
    int fd = open(mem, (only ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "probe_sem_read: %s: %m\n", mem);
        return 1;
    }
    int rc = 0, matched = 0;
    for (size_t k = 0; k < NNAMES; k++) {
        if (only && strcmp(only, names[k]) != 0)
            continue;
        matched = 1;
        uint64_t sem = 0;
        for (size_t i = 0; i < f.n && !sem; i++)
            if (strcmp(f.notes[i].provider, "evl") == 0 && strcmp(f.notes[i].name, names[k]) == 0)
                sem = f.notes[i].sem;
        if (!sem) {
            fprintf(stderr, "probe_sem_read: %s: no semaphore for evl:%s\n", exe, names[k]);
            rc = 1;
            continue;
        }
        const char *sec;
        uint64_t flags, off, addr;
        int bits;
        if (ls_sdt_section_of(&f, sem, &sec, &flags, &off, &bits) != 0 || !bits) {
            fprintf(stderr, "probe_sem_read: evl:%s: semaphore 0x%" PRIx64 " not in file data\n",
                    names[k], sem);
            rc = 1;
            continue;
        }
        if (runtime_addr(pid, (unsigned long)st.st_ino, off, &addr) != 0) {
            fprintf(stderr, "probe_sem_read: evl:%s: file offset 0x%" PRIx64 " not mapped in %ld\n",
                    names[k], off, pid);
            rc = 1;
            continue;
        }
        unsigned short v;
        if (pread(fd, &v, sizeof v, (off_t)addr) != (ssize_t)sizeof v) {
            fprintf(stderr, "probe_sem_read: evl:%s: read 0x%" PRIx64 ": %m\n", names[k], addr);
            rc = 1;
            continue;
        }
        if (only) {
            if ((delta < 0 && v == 0) || (delta > 0 && v == 0xffff)) {
                fprintf(stderr, "probe_sem_read: evl:%s: semaphore is %u, cannot add %ld\n",
                        names[k], v, delta);
                rc = 1;
                continue;
            }
            v = (unsigned short)(v + delta);
            if (pwrite(fd, &v, sizeof v, (off_t)addr) != (ssize_t)sizeof v) {
                fprintf(stderr, "probe_sem_read: evl:%s: write 0x%" PRIx64 ": %m\n", names[k],
                        addr);
                rc = 1;
                continue;
            }
        }
        printf("%s %u\n", names[k], v);
    }
    if (only && !matched) {
        fprintf(stderr, "probe_sem_read: no evl probe named '%s'\n", only);
        rc = 1;
    }
    close(fd);
    ls_sdt_close(&f);
    return rc;
}
