/* compiled by every build: a PR that breaks it fails its build */
int main(void) { return 0; }
