/* check_conformance: the conformance suite as a test program (main.c says
 * how to run it; `ssmstate conform` runs the same suite). */
#include "tests/conformance/conformance.h"

int main(int argc, char **argv)
{
    return conform_main(argc, argv, NULL);
}
