-- Keep a memory's row whole in its heap page. With the default target (about 2 kB) a 384-d embedding (1.5 kB)
-- plus text pushes most rows over it, and PostgreSQL moves the embedding to the TOAST table: every exact scan of a
-- small tenant and every cosine computed for a candidate then reads two or three more pages per row. Rows are
-- now compressed or moved out only past 8 kB, i.e. only for unusually long content. Affects rows written from
-- now on.
ALTER TABLE memory SET (toast_tuple_target = 8160);
