BEGIN
{
	s = strjoin("hello, ", "world");
	printf("%s %d %c\n", s, strlen(s), 'x');
	printf("%-10s|%10s|%.3s\n", substr(s, 0, 5), toupper(s), tolower("ABC"));
	printf("%d %d\n", index(s, "o"), rindex(s, "o", 9));
	printf("%s %s\n", basename("/usr/lib/libc.so"), dirname("/usr/lib/libc.so"));
	printf("%s\n", strstr(s, "wor") != "" ? "found" : "missing");
	printf("%x %o %u %lld %p\n", 255, 8, -1, 1LL << 40, 0x1000);
	printf("%5.2f%%\n", 0);
	x = strtoll("123", 10) + htons(1) + ntohl(2);
	trace(lltostr(x));
	exit(0);
}
