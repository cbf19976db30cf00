// Tile size shared by with_header.cu (tests edit a copy to check cache invalidation).
#define TILE 16
