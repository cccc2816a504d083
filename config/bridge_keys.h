/* Megatron Bridge's keys that graphtrain has no key of its own for (config/bridge_keys.c):
 * each is understood (a value that changes nothing here, or the one graphtrain runs) or
 * refused as "a Bridge key graphtrain does not support yet", with the reason. */
#ifndef GT_CONFIG_BRIDGE_KEYS_H
#define GT_CONFIG_BRIDGE_KEYS_H

#include <stddef.h>

enum {
    GT_BRIDGE_KEY_UNKNOWN = 0,    /* not a Bridge key of the table */
    GT_BRIDGE_KEY_UNDERSTOOD = 1, /* accepted: the value changes nothing here */
    GT_BRIDGE_KEY_REFUSED = -1,   /* msg[n] says why and what is understood */
};

/* Checks a dotted Bridge key and its value; fills msg only when refused. */
int gt_bridge_key_check(const char *name, const char *value, char *msg, size_t n);

/* The i-th key of the table, NULL past the end (tests walk it). */
const char *gt_bridge_key_name(size_t i);

#endif
