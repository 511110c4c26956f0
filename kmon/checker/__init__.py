"""kmon/checker"""
