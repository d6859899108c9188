/*
 * device.c - device names ("cpu", "cpu:N", "cuda", "cuda:N") to and from
 * tide_device, and the calling thread's default device.
 * Which devices exist and how they run work is the engine's business.
 */
#include "../core/internal.h"

#include <stdio.h>
#include <stdlib.h>

tide_status tide_device_parse(const char * name, tide_device * out) {
    if (!name) return tide_error_set(TIDE_E_DEVICE, "device: no name given");
    const char * colon = strchr(name, ':');
    size_t       len   = colon ? (size_t)(colon - name) : strlen(name);
    int32_t      type;
    if (len == 3 && strncmp(name, "cpu", 3) == 0)
        type = TIDE_DEVICE_CPU;
    else if (len == 4 && strncmp(name, "cuda", 4) == 0)
        type = TIDE_DEVICE_CUDA;
    else
        return tide_error_set(TIDE_E_DEVICE, "device: unknown device '%s' (expected cpu, cpu:N or cuda:N)", name);
    int32_t index = -1;
    if (colon) {
        char * end;
        long   v = strtol(colon + 1, &end, 10);
        if (colon[1] == '\0' || *end != '\0' || v < 0 || v > 1024)
            return tide_error_set(TIDE_E_DEVICE, "device: bad device index in '%s'", name);
        index = (int32_t)v;
    }
    if (type == TIDE_DEVICE_CUDA) {   /* "cuda" is cuda:0, as in PyTorch */
        int32_t n = tide_cuda_device_count();
        if (n == 0) return tide_error_set(TIDE_E_DEVICE, "device: '%s': %s", name, tide_cuda_status());
        if (index < 0) index = 0;
        if (index >= n)
            return tide_error_set(TIDE_E_DEVICE, "device: '%s' is not available: the CUDA devices are cuda:0 to cuda:%d",
                                  name, n - 1);
    }
    if (type == TIDE_DEVICE_CPU && index >= tide_engine_cpu_queues())
        return tide_error_set(TIDE_E_DEVICE, "device: '%s' is not available: the CPU devices are cpu and cpu:0 to cpu:%d",
                              name, tide_engine_cpu_queues() - 1);
    out->type  = type;
    out->index = index;
    return TIDE_OK;
}

char * tide_device_format(tide_device dev, char * buf, size_t n) {
    const char * t = dev.type == TIDE_DEVICE_CUDA ? "cuda" : "cpu";
    if (dev.index < 0)
        snprintf(buf, n, "%s", t);
    else
        snprintf(buf, n, "%s:%d", t, dev.index);
    return buf;
}

int32_t tide_device_cpu_count(void) { return tide_engine_cpu_queues(); }

static _Thread_local tide_device default_device = {TIDE_DEVICE_CPU, -1};

tide_status tide_set_default_device(tide_device dev) {
    if (dev.type != TIDE_DEVICE_CPU && dev.type != TIDE_DEVICE_CUDA)
        return tide_error_set(TIDE_E_DEVICE, "set_default_device: unknown device type %d", dev.type);
    /* a device that exists, at once (creation ops given a device set it twice a call) */
    if ((dev.type == TIDE_DEVICE_CPU && dev.index >= -1 && dev.index < tide_engine_cpu_queues()) ||
        (dev.type == TIDE_DEVICE_CUDA && dev.index >= 0 && dev.index < tide_cuda_device_count())) {
        default_device = dev;
        return TIDE_OK;
    }
    char        name[32];
    tide_device checked;   /* through the name, for the same checks and messages as everywhere */
    TIDE_CHECK(tide_device_parse(tide_device_format(dev, name, sizeof name), &checked));
    default_device = checked;
    return TIDE_OK;
}

tide_device tide_get_default_device(void) { return default_device; }

tide_device tide_default_device_swap(tide_device dev) {
    tide_device old = default_device;
    default_device  = dev;
    return old;
}
