// tessera <command>: placeholder until the CLI lands.
#include <cstdio>
int main() { std::puts("tessera"); return 0; }
