/* expect: invalid cast expression: "int" to "struct s" @ 3:13 */
struct s { int a; };
BEGIN { x = (struct s)1; }
