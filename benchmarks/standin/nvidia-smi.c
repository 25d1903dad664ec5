/* A minimal nvidia-smi for Flink's stock nvidia-gpu-discovery.sh on the NVML simulator: it answers the
 * script's one query, `nvidia-smi --query-gpu=index --format=csv,noheader`, with one GPU index a line,
 * making only the NVML calls that answer needs: init, the count, and per GPU its handle and index. A real
 * nvidia-smi makes many more (and a shutdown), so the stock script timed with this is a lower bound.
 *
 * Linked against the simulator's libnvidia-ml.so.1 (latency_model.py builds it) and, like the real one,
 * finding the library at run time by its soname (LD_LIBRARY_PATH: flink_gpu.simulator.environment). The
 * four prototypes are nvml.h's, declared here so that the stand-in needs no NVML headers. */
#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t; /* nvml.h: an enum; NVML_SUCCESS is 0 */
typedef struct nvmlDevice_st* nvmlDevice_t;

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index);

int main(int argc, char** argv) {
    if (argc != 3 || strcmp(argv[1], "--query-gpu=index") != 0 || strcmp(argv[2], "--format=csv,noheader") != 0) {
        fprintf(stderr,
                "nvidia-smi stand-in: answers only --query-gpu=index --format=csv,noheader (Flink's "
                "nvidia-gpu-discovery.sh); got other arguments\n");
        return 2;
    }
    nvmlReturn_t rc = nvmlInit_v2();
    unsigned int count = 0;
    if (rc == 0) rc = nvmlDeviceGetCount_v2(&count);
    if (rc != 0) {
        fprintf(stderr, "nvidia-smi stand-in: NVML error %d\n", rc);
        return 1;
    }
    for (unsigned int i = 0; i < count; ++i) {
        nvmlDevice_t device = NULL;
        unsigned int index = 0;
        rc = nvmlDeviceGetHandleByIndex_v2(i, &device);
        if (rc == 0) rc = nvmlDeviceGetIndex(device, &index);
        if (rc != 0) {
            fprintf(stderr, "nvidia-smi stand-in: NVML error %d for GPU %u\n", rc, i);
            return 1;
        }
        printf("%u\n", index);
    }
    return 0;
}
