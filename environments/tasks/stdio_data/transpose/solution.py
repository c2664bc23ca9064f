r, c = map(int, input().split())
rows = [input().split() for _ in range(r)]
for j in range(c):
    print(" ".join(rows[i][j] for i in range(r)))
