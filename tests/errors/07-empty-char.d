/* expect: empty character constant @ 2:13 */
BEGIN { x = ''; }
