/* Where the command's sessions run (`ssmstate serve`, and `run` on a CUDA
 * context): the CPU, or one CUDA device with a stream and two events. The
 * same calls serve both, so the code over them (bench/serve/serve_stream.c,
 * tools/session_device.c) has one path: on the CPU "device memory" is host
 * memory, uploads and downloads are memcpy and a step's work is done when
 * its calls return. The CUDA side is compiled only with HAVE_CUDA and calls the runtime directly;
 * the state itself is only ever touched through the public API. */
#ifndef SSM_TOOLS_DEVICE_H
#define SSM_TOOLS_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ssmstate/ssmstate.h"

/* Exit code when --device cuda is asked for and there is no CUDA build or no
 * GPU visible (Automake's SKIP), as `ssmstate bench` uses it. */
enum { DEVICE_EXIT_NO_GPU = 77 };

typedef struct cli_device {
    ssm_device where;      /* SSM_DEVICE_CPU, or SSM_DEVICE_CUDA and its index */
    char name[256];        /* "cpu", or the GPU's name */
    void *stream;          /* cudaStream_t (non-blocking) on CUDA; NULL on the CPU */
    void *start, *stop;    /* cudaEvent_t around a step's device work */
} cli_device;

/* Chooses the device: `forced` is NULL (CUDA when the build has it and a GPU
 * is visible: the config's cuda:N, or cuda:0 when it says cpu; else the
 * CPU), "cpu", "cuda" or "cuda:N". Fills d->where and d->name. Returns
 * CLI_EXIT_OK, DEVICE_EXIT_NO_GPU (with a line on stderr) when CUDA was forced
 * and cannot be had, or CLI_EXIT_USAGE after printing the error. */
int device_pick(const char *forced, const ssm_config *config, cli_device *d);

/* Creates the stream and events (nothing on the CPU). Returns 0, or -1 with
 * the reason in error. */
int device_open(cli_device *d, char *error, size_t len);
void device_close(cli_device *d);

/* Device memory (host memory on the CPU), zeroed; NULL when out of memory. */
void *device_alloc(const cli_device *d, size_t bytes);
void device_free(const cli_device *d, void *p); /* NULL is fine */

/* Copies host memory to the device, ordered on the stream (the host buffer
 * may be reused when the call returns). Returns 0, or -1 with a message. */
int device_upload(const cli_device *d, void *dst, const void *src, size_t bytes, char *error,
                 size_t len);

/* Waits for the stream, then copies device memory to the host. Returns 0,
 * or -1 with a message. */
int device_download(const cli_device *d, void *dst, const void *src, size_t bytes, char *error,
                   size_t len);

/* Waits for everything queued on the stream. Returns 0, or -1 with a
 * message. */
int device_sync(const cli_device *d, char *error, size_t len);

/* Marks the start of a step's device work on the stream. */
int device_step_begin(const cli_device *d, char *error, size_t len);

/* Marks its end, waits for it, and gives the device time between the two
 * marks in milliseconds (on the CPU: NAN, the calls ran to completion).
 * Returns 0, or -1 with a message (a failed kernel shows up here). */
int device_step_end(const cli_device *d, double *device_ms, char *error, size_t len);

/* Host monotonic clock in seconds. */
double device_now(void);

#endif
