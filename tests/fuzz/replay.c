/* replay.c: a stand-in for libFuzzer's main when the build has no fuzzer: runs
 * LLVMFuzzerTestOneInput once on every file named on the command line or found (not recursively) in
 * a named folder, so the fuzz targets build and their seed corpora are checked everywhere. Must not
 * mutate or write anything. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fprintf(stderr, "%s: out of memory\n", path);
            fclose(f);
            return 1;
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        return 1;
    }
    /* an exact-size copy, so ASan catches reads one past the end */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

int
main(int argc, char **argv)
{
    int nfiles = 0, nerr = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            nerr++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            nerr += replay_file(argv[i]);
            nfiles++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            perror(argv[i]);
            nerr++;
            continue;
        }
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (e->d_name[0] == '.') continue;
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            char *path = malloc(len);
            if (!path) {
                nerr++;
                break;
            }
            snprintf(path, len, "%s/%s", argv[i], e->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                nerr += replay_file(path);
                nfiles++;
            }
            free(path);
        }
        closedir(d);
    }
    printf("replayed %d inputs, %d unreadable\n", nfiles, nerr);
    return nerr != 0 || nfiles == 0;
}
