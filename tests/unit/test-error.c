/* test-error.c -- evl_strerror / evl_err_name against EVL_ERRNO_MAP. */
#define _GNU_SOURCE
#include "task.h"

#include <limits.h>

static const struct {
    const char *name;
    int value;
    const char *msg;
} table[] = {
#define XX(name, value, msg) { #name, value, msg },
    EVL_ERRNO_MAP(XX)
#undef XX
};
#define NTABLE (sizeof(table) / sizeof(table[0]))

TEST_IMPL(error_table)
{
    ASSERT_GE(NTABLE, 16);
    for (size_t i = 0; i < NTABLE; i++) {
        ASSERT_LT(table[i].value, 0);
        ASSERT_STR_EQ(evl_strerror(table[i].value), table[i].msg);
        ASSERT_STR_EQ(evl_err_name(table[i].value), table[i].name);
        for (size_t j = 0; j < i; j++) {
            ASSERT_NE(table[i].value, table[j].value);
            ASSERT_TRUE(strcmp(table[i].name, table[j].name) != 0);
        }
    }
    /* The enum agrees with the table. */
    ASSERT_EQ(EVL_ECANCELED, -ECANCELED);
    ASSERT_EQ(EVL_ETIMEDOUT, -ETIMEDOUT);
    ASSERT_EQ(EVL_ENOTTASK, -4001);
    ASSERT_EQ(EVL_EABANDONED, -4006);
    ASSERT_EQ(EVL_EGROUP, -4007);
    ASSERT_EQ(EVL_EOVERFLOW, -EOVERFLOW);
    /* The codes that used to share one are distinct. */
    ASSERT_NE(EVL_EGROUP, -EIO);
    ASSERT_NE(EVL_EOVERFLOW, EVL_EINVAL);
    ASSERT_STR_EQ(evl_err_name(EVL_EGROUP), "EGROUP");
    ASSERT_STR_EQ(evl_strerror(EVL_EGROUP), "unhandled errors in a task group");
    ASSERT_STR_EQ(evl_err_name(EVL_EOVERFLOW), "EOVERFLOW");
    ASSERT_STR_EQ(evl_strerror(EVL_EOVERFLOW), "value would overflow");
    ASSERT_STR_EQ(evl_err_name(EVL_ENOTTASK), "ENOTTASK");
    ASSERT_STR_EQ(evl_strerror(EVL_ENOTTASK), "not called from inside a task");
    ASSERT_STR_EQ(evl_err_name(0), "OK");
    ASSERT_STR_EQ(evl_strerror(0), "success");
    return 0;
}

TEST_IMPL(error_unknown)
{
    /* A negative errno outside the map still gets the system's words. */
    ASSERT_STR_EQ(evl_err_name(-ENOENT), "ENOENT");
    ASSERT_STR_EQ(evl_strerror(-ENOENT), strerrordesc_np(ENOENT));
    ASSERT_STR_EQ(evl_err_name(-ECONNREFUSED), "ECONNREFUSED");
    /* Numbers nobody knows: never NULL. */
    ASSERT_STR_EQ(evl_strerror(-99999), "unknown error");
    ASSERT_STR_EQ(evl_err_name(-99999), "EUNKNOWN");
    ASSERT_STR_EQ(evl_strerror(-4000), "unknown error");
    ASSERT_STR_EQ(evl_err_name(-4008), "EUNKNOWN");
    ASSERT_STR_EQ(evl_strerror(12345), "unknown error");
    ASSERT_STR_EQ(evl_err_name(7), "EUNKNOWN");
    return 0;
}

/* evl_strerror accepts "any negative errno value": INT_MIN must not be
 * negated (signed overflow; UBSan aborts on it). */
TEST_IMPL(error_int_min)
{
    ASSERT_STR_EQ(evl_strerror(INT_MIN), "unknown error");
    ASSERT_STR_EQ(evl_err_name(INT_MIN), "EUNKNOWN");
    ASSERT_STR_EQ(evl_strerror(INT_MIN + 1), "unknown error");
    return 0;
}
