// Package devscripts holds no code: its tests check the developer scripts
// under scripts/ and the way the Makefile and .ci/run call them.
//
// scripts/deps installs the Debian packages the tests need (`make deps`,
// which `make test` runs first). Its tests run it in a sandbox: a PATH of
// stub programs (apt-get, sudo, dpkg and id record their arguments) in which
// chosen tools are present or missing, so they check what the script
// decides to install, with which guard and when it refuses, without
// touching the machine's packages.
package devscripts
