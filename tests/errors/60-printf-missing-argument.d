/* expect: printf( ) prototype mismatch: conversion #2 (%d) is missing a corresponding value argument @ 2:16 */
BEGIN { printf("%d %d\n", 1); }
