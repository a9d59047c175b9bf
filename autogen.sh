#!/bin/sh
# Generates configure and Makefile.in; needs autoconf, automake, libtool, pkg-config.
set -e
cd "$(dirname "$0")"
autoreconf -fi
