/* error.c -- evl_strerror / evl_err_name, generated from EVL_ERRNO_MAP. */
#define _GNU_SOURCE
#include "evl.h"

#include <limits.h>
#include <netdb.h>
#include <string.h>

const char *evl_strerror(int err)
{
    switch (err) {
#define EVL__ERR_MSG(name, value, msg) case value: return msg;
    EVL_ERRNO_MAP(EVL__ERR_MSG)
#undef EVL__ERR_MSG
    case 0:
        return "success";
    }
    if (evl_is_eai(err))              /* evl_getaddrinfo's EAI_* codes */
        return gai_strerror(evl_eai_code(err));
    const char *s = err < 0 && err != INT_MIN ? strerrordesc_np(-err) : NULL;
    return s ? s : "unknown error";
}

const char *evl_err_name(int err)
{
    switch (err) {
#define EVL__ERR_NAME(name, value, msg) case value: return #name;
    EVL_ERRNO_MAP(EVL__ERR_NAME)
#undef EVL__ERR_NAME
    case 0:
        return "OK";
    }
    if (evl_is_eai(err))
        return "EAI";                 /* evl_strerror says which */
    const char *s = err < 0 && err != INT_MIN ? strerrorname_np(-err) : NULL;
    return s ? s : "EUNKNOWN";
}
