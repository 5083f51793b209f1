/* placeholder until the module lands */
typedef int echofs_placeholder_scan;
