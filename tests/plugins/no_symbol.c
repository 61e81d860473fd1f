/* A shared library that is not a plugin: it exports no entry symbol. */
__attribute__((visibility("default"))) int not_a_plugin(void);

int not_a_plugin(void)
{
    return 42;
}
