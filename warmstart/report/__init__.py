"""warmstart.report"""
