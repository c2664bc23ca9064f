n = int(input())
result = 1
for k in range(2, n + 1):
    result *= k
print(result)
