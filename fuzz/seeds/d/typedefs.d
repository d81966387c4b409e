typedef struct point {
	int x;
	int y;
	char name[16];
} point_t;

typedef unsigned long long counter_t;

enum color { RED, GREEN = 5, BLUE };

struct list {
	struct list *next;
	uint32_t value;
};

inline int LIMIT = 10 * 2;
counter_t hits;
int arr[8];
string names[int];

BEGIN
{
	hits = sizeof(point_t) + offsetof(struct point, y);
	hits += arr[1] + BLUE;
	names[3] = "three";
	p = (struct list *)arg0;
	v = p != NULL ? p->value : 0;
	printf("%d %d %s\n", hits, arr[1], names[3]);
	this->c = (char)LIMIT;
	exit(0);
}
