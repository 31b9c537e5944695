/* files.h: the files one run of snnc reads and writes (files.c), checked together before anything
 * is written: no output may be a file the run reads, nor the file of another output. How each
 * file is then written is rt_write_file's rule (runtime/tensor_io.h). */
#ifndef SNN_DRIVER_FILES_H
#define SNN_DRIVER_FILES_H

#include <stdbool.h>

typedef struct FileList FileList;

FileList *files_new(void);
void files_free(FileList *l);
/* path (copied), and what it is to the run for messages ("the model", "--output") */
void files_input(FileList *l, const char *path, const char *role);
void files_output(FileList *l, const char *path, const char *role);
/* Reports every output that names an input's file or another output's ("FILE: error: ..."); false
 * if there is one. Paths are compared as the files they name (device and inode: links, "./x" and
 * hard links alike); a path that does not exist yet by its directory's and its own name. Streams
 * (devices, FIFOs, /dev/stdout) and directories are not files to overwrite and are not compared. */
bool files_check(const FileList *l);

#endif
