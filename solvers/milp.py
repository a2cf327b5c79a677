def solve_spot(problem, time_limit_s, gap): raise NotImplementedError
def solve_serverless(problem, time_limit_s, gap): raise NotImplementedError
