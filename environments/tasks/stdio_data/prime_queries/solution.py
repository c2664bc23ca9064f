def is_prime(x):
    if x < 2:
        return False
    d = 2
    while d * d <= x:
        if x % d == 0:
            return False
        d += 1
    return True


q = int(input())
for _ in range(q):
    print("YES" if is_prime(int(input())) else "NO")
